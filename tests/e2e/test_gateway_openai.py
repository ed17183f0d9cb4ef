"""What a client written for OpenAI meets first, through the gateway on real tritonservers (issue 54): OpenAI's
defaults (mp3 when no format is named; `pcm` at 24 kHz from every family, a header's format at the model's rate,
`X-Sample-Rate` always), the listings UIs fill their menus from, and `X-Request-Id` from the response through the
gateway's log to the router's log."""
from __future__ import annotations

import re
import time

import httpx
import numpy as np
import pytest

from server.compare import free_ports
from server.gateway.config import GatewayConfig
from server.gateway.server import GatewayProcess
from server.gateway.speech import OPENAI_PCM_RATE, OPENAI_VOICES
from tests.audio_decode import aligned_correlation, assert_same_pcm16, decode
from tests.waiting import wait_for

SPEECH = {"model": "tts-1", "input": "Twenty-four kilohertz.", "voice": "alloy", "seed": 5, "max_audio_seconds": 0.6,
          "ignore_eos": True}
MAX_MP3_PADDING_S = 0.2  # LAME's priming and its last frame's padding (test_gateway_formats.py)


def post(base: str, headers: dict | None = None, **fields) -> httpx.Response:
    return httpx.post(base + "/v1/audio/speech", json={**SPEECH, **fields}, headers=headers or {}, timeout=120)


def pcm16(data: bytes) -> np.ndarray:
    return np.frombuffer(data, "<i2")


def start_gateway(grpc_url: str, log_path) -> GatewayProcess:
    process = GatewayProcess(GatewayConfig(tritons=(grpc_url,), port=free_ports(1)[0]), log_path=log_path)
    process.wait_ready(60)
    return process


def test_every_family_sends_pcm_at_24_khz_and_a_format_with_a_header_at_its_own_rate(family, tmp_path):
    """The same request (same seed) as `pcm`, as `wav` and with no format: `pcm` is OpenAI's 24 kHz whatever the
    model's rate (resampled where it differs), the WAV and the MP3 say the model's rate, `X-Sample-Rate` is on each."""
    gateway = start_gateway(family.url, tmp_path / "gateway.log")
    try:
        pcm, wav, unnamed = post(gateway.url, response_format="pcm"), post(gateway.url, response_format="wav"), \
            post(gateway.url)
        asked = post(gateway.url, response_format="pcm", sample_rate=16000)
    finally:
        gateway.stop()
    for response in (pcm, wav, unnamed, asked):
        assert response.status_code == 200, response.text
    assert (pcm.headers["x-sample-rate"], pcm.headers["content-type"]) == (str(OPENAI_PCM_RATE), "audio/pcm")
    model_audio, rate = decode("wav", wav.content)
    assert rate == family.sample_rate and wav.headers["x-sample-rate"] == str(family.sample_rate)
    seconds = model_audio.size / family.sample_rate
    assert pcm16(pcm.content).size == round(seconds * OPENAI_PCM_RATE)
    if family.sample_rate == OPENAI_PCM_RATE:  # nothing to resample: the same samples
        assert_same_pcm16(pcm16(pcm.content), pcm16(wav.content[44:]))
    else:  # resampled chunk by chunk as it streamed: the model's whole audio resampled at once, to rounding
        import soxr
        expected = soxr.resample(model_audio, family.sample_rate, OPENAI_PCM_RATE, quality="HQ")
        correlation, lag = aligned_correlation(expected, pcm16(pcm.content).astype(np.float32) / 32768.0, max_lag=10)
        assert lag == 0 and correlation > 0.9999, correlation  # measured 0.99999999 for Zonos (44.1 kHz)
    assert (unnamed.headers["content-type"], unnamed.headers["x-sample-rate"]) == ("audio/mpeg",
                                                                                  str(family.sample_rate))
    mp3, _ = decode("mp3", unnamed.content)
    assert 0 <= mp3.size / family.sample_rate - seconds <= MAX_MP3_PADDING_S
    assert asked.headers["x-sample-rate"] == "16000" and pcm16(asked.content).size == round(seconds * 16000)


@pytest.fixture(scope="module")
def traced(server, tmp_path_factory):
    """A gateway in front of the default server, and both their logs."""
    log_path = tmp_path_factory.mktemp("gateway") / "gateway.log"
    gateway = start_gateway(server.grpc_url, log_path)
    yield gateway, log_path, server.log_path
    gateway.stop()


def test_the_menus_list_the_models_and_every_voice_a_request_may_name(traced):
    gateway, _, _ = traced
    models = httpx.get(gateway.url + "/v1/audio/models", timeout=30).json()
    ids = [m["id"] for m in models["models"]]
    assert ids[0] == "qwen3-tts-tiny" and {"tts-1", "tts-1-hd", "gpt-4o-mini-tts"} <= set(ids)
    assert [m["id"] for m in models["data"]] == ids
    listed = httpx.get(gateway.url + "/v1/audio/voices", timeout=30).json()
    assert listed["voices"] == listed["data"]
    presets = [v["id"] for v in listed["voices"] if v["kind"] == "preset"]
    assert presets[:3] == ["tiny", "tiny_b", "vivian"] and "ryan" in presets  # the model's, in its order
    assert [v["id"] for v in listed["voices"] if v["kind"] == "openai"] == list(OPENAI_VOICES)
    assert not any(v["registered"] for v in listed["voices"]) and all(v["name"] == v["id"] for v in listed["voices"])
    for voice in ("vivian", "alloy"):  # each listed voice speaks
        assert post(gateway.url, voice=voice, response_format="pcm", max_audio_seconds=0.2).status_code == 200


def test_a_request_s_id_is_on_its_response_and_in_the_gateway_s_and_the_router_s_logs(traced):
    gateway, gateway_log, router_log = traced
    answered = post(gateway.url, {"X-Request-Id": "e2e-trace-54"}, response_format="pcm")
    assert answered.status_code == 200 and answered.headers["x-request-id"] == "e2e-trace-54"
    made = post(gateway.url, response_format="pcm").headers["x-request-id"]
    refused = post(gateway.url, {"X-Request-Id": "e2e-refused-54"}, voice="nobody")
    assert refused.status_code == 400 and refused.headers["x-request-id"] == "e2e-refused-54"
    assert re.fullmatch(r"[0-9a-f]{32}", made)
    assert httpx.get(gateway.url + "/v1/models", headers={"X-Request-Id": "e2e-list"}).headers["x-request-id"] \
        == "e2e-list"

    def logged(path, *patterns) -> bool:
        text = path.read_text(errors="replace")
        return all(re.search(p, text, re.M) for p in patterns)
    assert wait_for(lambda: logged(gateway_log, r"\[e2e-trace-54\] POST /v1/audio/speech 200 ",
                                   rf"\[{made}\] POST /v1/audio/speech 200 ",
                                   r"\[e2e-refused-54\] POST /v1/audio/speech 400 "), timeout_s=10, poll_s=0.2), \
        gateway_log.read_text()[-3000:]
    stream = r"stream ([0-9a-f]{32})"
    assert wait_for(lambda: logged(router_log, rf"voxlane\.router INFO request e2e-trace-54: {stream} started",
                                   r"voxlane\.router INFO request e2e-trace-54: stream [0-9a-f]{32} ended: done",
                                   rf"request {made}: stream [0-9a-f]{{32}} ended: done"), timeout_s=10, poll_s=0.2), \
        router_log.read_text()[-3000:]
    # the refusal came from the LM lane, after the router started the stream: its reason is in the router's line
    assert logged(router_log, r"request e2e-refused-54: stream [0-9a-f]{32} ended: bad_input \(unknown voice")


def test_a_client_that_sends_one_id_every_time_gets_it_back_and_its_streams_stay_apart(traced):
    gateway, _, router_log = traced
    answers = [post(gateway.url, {"X-Request-Id": "e2e-same-id"}, response_format="pcm") for _ in range(2)]
    assert [(a.status_code, a.headers["x-request-id"]) for a in answers] == [(200, "e2e-same-id")] * 2
    time.sleep(0.2)
    text = router_log.read_text(errors="replace")
    assert "request e2e-same-id: stream" in text and "request e2e-same-id.2: stream" in text
