"""The OpenAI-compatible gateway, driven by the `openai` SDK, in front of a real tritonserver."""
from __future__ import annotations

import base64
import json
import struct
import time
import urllib.error
import urllib.request
from dataclasses import replace

import numpy as np
import openai
import pytest

from server.compare import free_ports
from clients.bench.config import smoke_config
from clients.bench.runner import run_bench
from server.gateway.config import GatewayConfig
from server.gateway.server import GatewayProcess
from clients.stream import synthesize
from tests.audio_decode import assert_same_pcm16
from tests.e2e.test_cancel import wait_for
from tests.e2e.test_metrics import no_live_requests, scrape

TEXT = "The gateway speaks OpenAI."
EXTRA = {"seed": 5, "max_audio_seconds": 1.6, "ignore_eos": True}  # 20 frames: chunks of 2, 4, 8, 6


@pytest.fixture(scope="module")
def gateway(server, tmp_path_factory):
    dead = f"127.0.0.1:{free_ports(1)[0]}"  # a second server that is down: streams must go around it
    config = GatewayConfig(tritons=(server.grpc_url, dead), port=free_ports(1)[0])
    process = GatewayProcess(config, log_path=tmp_path_factory.mktemp("gateway") / "gateway.log")
    process.wait_ready(60)
    yield process
    process.stop()


@pytest.fixture(scope="module")
def client(gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def grpc_pcm(url) -> np.ndarray:
    """The same request over Triton's gRPC stream, quantised as the gateway does."""
    result = synthesize(url, TEXT, **EXTRA)
    return (np.clip(result.audio, -1.0, 1.0) * 32767.0).astype("<i2")


def speak(client, **fields) -> tuple[bytes, list[float], str]:
    """(the body, the arrival time of each piece, the content type)."""
    request = {"model": "qwen3-tts-tiny", "input": TEXT, "voice": "alloy", **fields}
    pieces, times = [], []
    with client.audio.speech.with_streaming_response.create(**request, extra_body=EXTRA) as response:
        for piece in response.iter_bytes():
            pieces.append(piece)
            times.append(time.perf_counter())
        content_type = response.headers["content-type"]
    return b"".join(pieces), times, content_type


def test_wav_stream_is_a_valid_wav_of_the_grpc_audio(client, grpc_pcm):
    body, times, content_type = speak(client, response_format="wav")
    assert content_type == "audio/wav"
    riff, _, wave, fmt, _, audio_format, channels, rate, _, _, bits, data, size = struct.unpack(
        "<4sI4s4sIHHIIHH4sI", body[:44])
    assert (riff, wave, fmt, data) == (b"RIFF", b"WAVE", b"fmt ", b"data")
    assert (audio_format, channels, rate, bits) == (1, 1, 24000, 16)
    assert size == 0xFFFFFFFF  # streamed: the length is not known when the header goes out
    assert_same_pcm16(np.frombuffer(body[44:], "<i2"), grpc_pcm)
    assert len(times) > 1  # chunk by chunk, not one buffered body


def test_pcm_stream_matches_the_grpc_audio(client, grpc_pcm):
    body, _, content_type = speak(client, response_format="pcm", stream_format="audio")
    assert content_type == "audio/pcm"
    assert_same_pcm16(np.frombuffer(body, "<i2"), grpc_pcm)


def test_sse_stream_has_one_delta_per_chunk_then_done(client, grpc_pcm):
    body, _, content_type = speak(client, response_format="pcm", stream_format="sse")
    assert content_type.startswith("text/event-stream")
    events = [json.loads(line[len("data: "):]) for line in body.decode().split("\n\n") if line]
    assert [e["type"] for e in events] == ["speech.audio.delta"] * 4 + ["speech.audio.done"]
    pcm = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    assert_same_pcm16(np.frombuffer(pcm, "<i2"), grpc_pcm)
    assert events[-1]["usage"]["output_tokens"] == 4


@pytest.mark.parametrize("fields, param", [
    ({"speed": 9}, "speed"),
    ({"response_format": "wma"}, "response_format"),
    ({"stream_format": "chunks"}, "stream_format"),
    ({"input": "   "}, "input"),  # the server's own check, mapped onto OpenAI's shape
    ({"voice": "nobody"}, "voice"),
])
def test_bad_input_is_an_openai_bad_request(client, fields, param):
    request = {"model": "qwen3-tts-tiny", "input": TEXT, "voice": "alloy", **fields}
    with pytest.raises(openai.BadRequestError) as caught:
        with client.audio.speech.with_streaming_response.create(**request, extra_body=EXTRA):
            pass
    assert caught.value.status_code == 400
    assert caught.value.body["param"] == param and caught.value.body["type"] == "invalid_request_error"
    assert caught.value.body["message"]


def test_unknown_model_and_wrong_extra_field_types(client):
    with pytest.raises(openai.NotFoundError) as caught:
        client.audio.speech.create(model="tts-9000", input=TEXT, voice="alloy", response_format="wav")
    assert caught.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError) as caught:
        client.audio.speech.create(model="tts-1", input=TEXT, voice="alloy", extra_body={"seed": "five"})
    assert caught.value.body["param"] == "seed"


def test_models_lists_the_served_model_first_then_openais_names(client):
    assert [m.id for m in client.models.list().data] == ["qwen3-tts-tiny", "tts-1", "tts-1-hd", "gpt-4o-mini-tts"]


@pytest.mark.parametrize("model", ["qwen3-tts-tiny", "tts-1", "gpt-4o-mini-tts"])
def test_every_listed_model_answers_on_its_own(client, model):
    assert client.models.retrieve(model).id == model


def test_a_model_that_only_starts_like_openais_is_refused(client):
    with pytest.raises(openai.NotFoundError) as caught:
        client.models.retrieve("tts-1xyz")
    assert caught.value.body["code"] == "model_not_found"
    with pytest.raises(openai.NotFoundError) as caught:
        client.audio.speech.create(model="tts-1xyz", input=TEXT, voice="alloy", response_format="pcm")
    assert caught.value.body["code"] == "model_not_found"


def raw_request(gateway, path: str, body: bytes | None = None, method: str = "POST") -> tuple[int, dict, dict]:
    """(status, headers, JSON body) of one request; the body must be JSON whatever the status."""
    request = urllib.request.Request(gateway.url + path, data=body, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, dict(response.headers), json.loads(response.read())
    except urllib.error.HTTPError as exc:
        assert exc.headers["Content-Type"].startswith("application/json"), exc.headers["Content-Type"]
        return exc.code, dict(exc.headers), json.loads(exc.read())


def speech_body(**fields) -> bytes:
    return json.dumps({"model": "tts-1", "input": TEXT, "voice": "alloy", "response_format": "pcm",
                       **EXTRA, **fields}).encode()


@pytest.mark.parametrize("body, param", [
    (speech_body(input="\ud800"), "input"),  # json.dumps writes the lone surrogate as \ud800
    (speech_body(seed=2 ** 63), "seed"),
    (speech_body(top_k=4294967301), "top_k"),
    (b"{not json", None),
])
def test_input_errors_are_400_in_openais_shape(gateway, body, param):
    status, _, answer = raw_request(gateway, "/v1/audio/speech", body)
    assert status == 400 and answer["error"]["type"] == "invalid_request_error", answer
    assert answer["error"]["param"] == param and answer["error"]["message"]


def test_an_oversized_body_a_wrong_method_and_an_unknown_path_are_4xx_json(gateway):
    status, _, answer = raw_request(gateway, "/v1/audio/speech", b'{"input": "' + b"a" * (2 << 20) + b'"}')
    assert status == 413 and "larger than" in answer["error"]["message"], answer
    status, headers, answer = raw_request(gateway, "/v1/audio/speech", method="GET")
    assert status == 405 and "POST" in headers["Allow"] and answer["error"]["type"] == "invalid_request_error"
    status, _, answer = raw_request(gateway, "/v1/nothing-here", method="GET")
    assert status == 404 and answer["error"]["message"]


def test_client_that_disconnects_cancels_its_triton_stream(client, gateway, server):
    request = {"model": "tts-1", "input": TEXT, "voice": "alloy", "response_format": "pcm"}
    assert no_live_requests(server), "an earlier stream lives on"
    with client.audio.speech.with_streaming_response.create(
            **request, extra_body={"seed": 3, "max_audio_seconds": 60.0, "ignore_eos": True}) as response:
        # the first chunk: the request is live in the LM. The iterator is kept: a dropped one is closed, and with it
        # the connection, so the stream was cancelled before the test looked at it (a race the cancel won once)
        chunks = response.iter_bytes()
        next(chunks)
        # the gauge is published by the LM's loop, a moment after the chunk may already have reached us
        assert wait_for(lambda: scrape(server)["voxlane_live_requests"] == 1, timeout_s=5), live_now(server)
    # 60 s of audio would take the tiny LM much longer: the stream must end within a step or two
    assert wait_for(lambda: scrape(server)["voxlane_live_requests"] == 0, timeout_s=5), live_now(server)
    assert wait_for(lambda: _health(gateway)["servers"][0]["live_streams"] == 0, timeout_s=5)


def live_now(server) -> str:
    """The failure message of a wait on the live gauge: its value at the end, and the LM's batch."""
    metrics = scrape(server)
    return f"live {metrics['voxlane_live_requests']}, LM batch {metrics.get('voxlane_lm_batch_size')}"


def test_health_reports_the_down_server_and_metrics_the_write_overhead(gateway):
    report = _health(gateway)
    assert report["status"] == "ok" and [s["ready"] for s in report["servers"]] == [True, False]
    text = urllib.request.urlopen(gateway.url + "/metrics", timeout=5).read().decode()
    p50 = next(line for line in text.splitlines() if line.startswith('voxlane_gateway_chunk_write_ms{quantile="0.5"}'))
    assert 0 < float(p50.split()[-1]) < 100


def test_bench_through_the_gateway_counts_all_the_audio(gateway, server, tmp_path):
    """Every chunk's audio counted through the gateway; with the server's /metrics named, the rate also has the
    server's side: the lanes and the first audio's phases, one of each per request (the gateway's only server)."""
    config = replace(smoke_config(gateway.url.removeprefix("http://"), tmp_path), rates=(2.0,), duration_s=2.0,
                     max_audio_seconds=0.8, protocol="openai", metrics_url=server.metrics_url)
    results = run_bench(config, log=lambda line: None)
    records = results["runs"][0]["records"]
    assert records and all(r["error"] is None and r["done_s"] is not None for r in records)
    for record in records:  # the server makes whole 80 ms frames of the requested seconds
        expected = round(record["requested_audio_s"] * 12.5) / 12.5
        assert abs(sum(c["duration_s"] for c in record["chunks"]) - expected) < 1e-6
    assert results["server"]["mode"] == "voxlane"
    [summary] = results["summaries"]
    phases = summary["lanes"]["first_audio_ms"]
    assert list(phases) == ["to_lm", "queue", "prefill", "frames", "channel", "codec", "send"]
    assert all(stats["count"] == len(records) for stats in phases.values())


def _health(gateway) -> dict:
    return json.load(urllib.request.urlopen(gateway.url + "/health", timeout=5))
