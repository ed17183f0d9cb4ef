"""Streaming audio in (issue 36) through a real tritonserver serving `tse-tiny`: an audio-in session's pieces are
coded by the voice encoder lane in fixed chunks and read by the interleaved LM, so the same seed and input give
the same audio however the client cut the input; the output is as long as the input; a bad piece is refused with
a code and the stream goes on; a model that speaks text refuses input audio by name."""
from __future__ import annotations

import random
import re
import time
import urllib.request

import numpy as np
import pytest

from clients.audio_stream import stream_audio_in
from clients.stream import StreamError
from protocol.tensors import PIECE_ERROR_CODES
from tests.e2e.conftest import start_server
from tests.e2e.test_streaming import PATH_ROUNDING
from tests.e2e.test_metrics import scrape
from tests.waiting import wait_for

RATE = 24000


@pytest.fixture(scope="module")
def tse_server(model_cache, tmp_path_factory):
    server = start_server("tse-tiny", tmp_path_factory)
    yield server
    server.stop(grace_s=0)


@pytest.fixture(scope="module")
def tse_url(tse_server):
    return tse_server.grpc_url


def encoder_calls(server) -> float:
    """How many requests the voice encoder lane has served (Triton's own count: the router's BLS calls)."""
    text = urllib.request.urlopen(server.metrics_url, timeout=5).read().decode()
    match = re.search(r'^nv_inference_request_success\{model="voice_encoder",version="1"\} ([0-9.e+]+)$', text, re.M)
    assert match, "no count of the voice encoder's requests"
    return float(match.group(1))


def assert_freed(server) -> None:
    """No stream holds a router stream or an LM row, and the encoder lane gets no more of its chunks."""
    assert wait_for(lambda: scrape(server)["voxlane_live_requests"] == 0
                    and scrape(server)["voxlane_lm_live_streams"] == 0, timeout_s=15), scrape(server)
    calls = encoder_calls(server)
    time.sleep(1.0)  # an input still being coded would take a chunk every 0.32 s
    assert encoder_calls(server) == calls


def noise(seconds: float, seed: int, level: float = 0.3) -> np.ndarray:
    return (np.random.default_rng(seed).uniform(-1, 1, int(seconds * RATE)) * level).astype(np.float32)


ENROLL = noise(1.0, 1)
INPUT = noise(2.3, 2)  # 29 frames of 1920 samples (the last partial): 7 chunks of 4, then 1 frame


def cut(audio: np.ndarray, rng: random.Random) -> list[np.ndarray]:
    """`audio` in pieces of random sizes (empty ones, and ones across frame and chunk edges, among them)."""
    pieces, start = [], 0
    while start < audio.size:
        size = rng.choice([0, 100, 1919, 5000, 7680, 13000])
        pieces.append(audio[start:start + size])
        start += size
    return pieces


def extract(url: str, pieces: list[np.ndarray], seed: int = 7):
    return stream_audio_in(url, pieces, RATE, ENROLL, RATE, seed=seed, timeout_s=60)


def test_the_same_input_cut_differently_gives_the_same_audio_as_long_as_the_input(tse_url):
    whole = extract(tse_url, [INPUT])
    assert not whole.piece_errors
    frames = -(-INPUT.size // 1920)
    assert whole.audio.shape == (frames * 1920,) and whole.sample_rate == RATE
    assert [c.index for c in whole.chunks] == list(range(len(whole.chunks)))
    rng = random.Random(0)
    for _ in range(2):
        pieces = cut(INPUT, rng)
        again = extract(tse_url, pieces)
        assert not again.piece_errors
        if [c.lane for c in again.chunks] == [c.lane for c in whole.chunks]:
            np.testing.assert_array_equal(again.audio, whole.audio, err_msg=str([p.size for p in pieces]))
        else:  # routed differently (by timing): the same frames, decoded by the two paths
            np.testing.assert_allclose(again.audio, whole.audio, rtol=0, atol=PATH_ROUNDING,
                                       err_msg=str([p.size for p in pieces]))
    other = extract(tse_url, [noise(2.3, 3)])
    assert other.audio.shape == whole.audio.shape and not np.array_equal(other.audio, whole.audio)  # it listens


@pytest.mark.parametrize("bad, code", [
    (np.full(100, np.nan, np.float32), "bad_piece"),
    (np.full(100, 1.5, np.float32), "bad_piece"),
])
def test_a_bad_piece_is_refused_and_the_stream_goes_on(tse_url, bad, code):
    pieces = [INPUT[:10000], bad, INPUT[10000:]]
    result = extract(tse_url, pieces)
    assert [e.code for e in result.piece_errors] == [code] and result.piece_errors[0].param == "input_audio"
    assert result.audio.shape == (-(-INPUT.size // 1920) * 1920,)  # the refused piece changed nothing


def test_an_output_capped_before_its_input_ends_says_so_after_the_audio_up_to_the_cap(tse_url):
    """Input past the session's `max_audio_seconds` is never answered: the stream ends with an error that names
    the cap, and what came before it is the whole stream's beginning (the same codes; the last chunk decoded in
    another batch shape, so equal to float rounding)."""
    whole = extract(tse_url, [INPUT])
    with pytest.raises(StreamError) as raised:
        stream_audio_in(tse_url, [INPUT], RATE, ENROLL, RATE, seed=7, timeout_s=60, max_audio_seconds=0.64)
    ended, partial = raised.value.ended, raised.value.partial
    assert ended.code == "input_past_max_audio_seconds" and ended.param == "max_audio_seconds", ended
    assert partial is not None and partial.audio.shape == (8 * 1920,)  # 0.64 s: 8 frames of 1920 samples
    np.testing.assert_allclose(partial.audio, whole.audio[:8 * 1920], atol=1e-5)  # its last chunk: one decode


def test_a_cap_longer_than_the_server_fits_is_refused_at_once_with_the_longest_that_fits(tse_url):
    """An interleaved stream writes its input's frames too: 1000 s of it cannot fit a 2048-position row."""
    with pytest.raises(StreamError) as raised:
        stream_audio_in(tse_url, [INPUT], RATE, ENROLL, RATE, timeout_s=30, max_audio_seconds=1000.0)
    ended = raised.value.ended
    assert ended.param == "max_audio_seconds" and "max_seq_len is 2048" in ended.message, ended
    assert re.search(r"may be at most 81\.\d\d s", ended.message), ended.message
    assert not raised.value.partial.chunks


def test_a_model_that_speaks_text_refuses_input_audio(url):
    with pytest.raises(StreamError) as raised:
        stream_audio_in(url, [INPUT[:5000]], RATE, ENROLL, RATE, timeout_s=30)
    assert raised.value.ended.code == "input_audio_unsupported"


def test_a_rate_off_the_frame_grid_is_refused(tse_url):
    with pytest.raises(StreamError) as raised:
        stream_audio_in(tse_url, [INPUT[:5000]], 22001, ENROLL, RATE, timeout_s=30)
    assert raised.value.ended.code == "unsupported_input_sample_rate"


def test_an_input_that_stops_coming_times_out_and_frees_its_row(tse_server):
    """`text_idle_timeout_s` bounds the wait for an audio-in session's next piece as it does a text session's;
    the server's end of the stream frees its LM row and its encoder work."""
    with pytest.raises(StreamError) as raised:
        stream_audio_in(tse_server.grpc_url, [INPUT[:8000], INPUT[8000:]], RATE, ENROLL, RATE, timeout_s=30,
                        piece_gap_s=2.5, text_idle_timeout_s=1.0)
    assert raised.value.ended.code == "input_idle_timeout"
    assert_freed(tse_server)


class LeftTheCall(Exception):
    pass


def test_a_client_that_leaves_mid_input_frees_its_row_and_its_encoder_work(tse_server):
    """The client's end: it cancels after its first chunk, its input still coming at real time."""
    long_input = noise(8.0, 4)
    pieces = [long_input[i:i + 1920] for i in range(0, long_input.size, 1920)]
    heard = []

    def leave(chunk):
        heard.append(chunk.index)
        raise LeftTheCall
    with pytest.raises(LeftTheCall):
        stream_audio_in(tse_server.grpc_url, pieces, RATE, ENROLL, RATE, timeout_s=60, piece_gap_s=0.08,
                        on_chunk=leave)
    assert heard == [0]
    assert_freed(tse_server)
    again = extract(tse_server.grpc_url, [INPUT])  # and the server serves the next session in full
    assert again.audio.shape == (-(-INPUT.size // 1920) * 1920,)


def test_voxlane_say_streams_a_file_in_at_real_time_and_keeps_the_audio_before_an_error(tse_url, tmp_path):
    import subprocess
    import sys
    import wave

    def write(path, samples):
        with wave.open(str(path), "wb") as f:
            f.setnchannels(1), f.setsampwidth(2), f.setframerate(RATE)
            f.writeframes((samples * 32767).astype("<i2").tobytes())
    write(tmp_path / "in.wav", INPUT[:24000])
    write(tmp_path / "enroll.wav", ENROLL)
    done = subprocess.run([sys.executable, "-m", "server.cli", "say", "--url", tse_url, "--audio-in",
                           str(tmp_path / "in.wav"), "--enroll", str(tmp_path / "enroll.wav"), "--seed", "1",
                           "-o", str(tmp_path / "out.wav")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    with wave.open(str(tmp_path / "out.wav")) as f:
        assert f.getnframes() == -(-24000 // 1920) * 1920 and f.getframerate() == RATE
    capped = subprocess.run([sys.executable, "-m", "server.cli", "say", "--url", tse_url, "--audio-in",
                             str(tmp_path / "in.wav"), "--enroll", str(tmp_path / "enroll.wav"), "--seed", "1",
                             "--max-audio-seconds", "0.64", "-o", str(tmp_path / "capped.wav")],
                            capture_output=True, text=True, timeout=120)
    assert capped.returncode == 1 and "max_audio_seconds (0.64 s)" in capped.stderr, capped.stderr
    with wave.open(str(tmp_path / "capped.wav")) as f:  # the audio up to the cap is kept
        assert f.getnframes() == 8 * 1920
    refused = subprocess.run([sys.executable, "-m", "server.cli", "say", "Hello.", "--url", tse_url, "--audio-in",
                              str(tmp_path / "in.wav"), "--enroll", str(tmp_path / "enroll.wav")],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "no TEXT" in refused.stderr


# ---- the gateway's WebSocket ------------------------------------------------------------------
@pytest.fixture(scope="module")
def ws_base(tse_url, tmp_path_factory):
    from server.compare import free_ports
    from server.gateway.config import GatewayConfig
    from server.gateway.server import GatewayProcess
    from clients.voices import register_voice

    register_voice(tse_url, "target", ENROLL, RATE, x_vector_only=True)
    process = GatewayProcess(GatewayConfig(tritons=(tse_url,), port=free_ports(1)[0]),
                             log_path=tmp_path_factory.mktemp("gateway") / "gateway.log")
    process.wait_ready(60)
    yield process.url.replace("http://", "ws://")
    process.stop()


async def _socket_session(base: str, messages: list) -> tuple[bytes, list[dict]]:
    import json

    import aiohttp
    audio, events = bytearray(), []
    async with aiohttp.ClientSession() as http, http.ws_connect(base + "/v1/audio/speech/stream") as ws:
        for message in messages:
            await (ws.send_bytes(message) if isinstance(message, bytes) else ws.send_json(message))
        while True:
            received = await ws.receive(60)
            if received.type is aiohttp.WSMsgType.BINARY:
                audio += received.data
            elif received.type is aiohttp.WSMsgType.TEXT:
                events.append(json.loads(received.data))
            else:
                return bytes(audio), events


def test_the_gateway_s_websocket_streams_audio_in_as_binary_pcm_or_base64(ws_base, tse_url):
    import asyncio
    import base64

    from audio.pcm import pcm16
    from tests.audio_decode import assert_same_pcm16

    pcm = pcm16(INPUT)
    heard = np.frombuffer(pcm, "<i2").astype(np.float32) / 32768.0  # what the server hears through the socket
    direct = np.frombuffer(pcm16(extract(tse_url, [heard]).audio), "<i2")
    update = {"type": "session.update", "session": {"voice": "target", "input_sample_rate": RATE, "seed": 7}}
    pieces = [pcm[i:i + 9000] for i in range(0, len(pcm), 9000)]
    audio, events = asyncio.run(_socket_session(ws_base, [update, *pieces, {"type": "input_audio.done"}]))
    assert events[-1]["type"] == "audio.done" and not [e for e in events if e["type"] == "error"]
    assert_same_pcm16(np.frombuffer(audio, "<i2"), direct)
    as_base64 = [{"type": "input_audio.append", "audio": base64.b64encode(p).decode()} for p in pieces]
    again, _ = asyncio.run(_socket_session(ws_base, [update, *as_base64, {"type": "input_audio.done"}]))
    assert_same_pcm16(np.frombuffer(again, "<i2"), np.frombuffer(audio, "<i2"))  # chunks may take other codec lanes


def test_the_websocket_refuses_text_in_an_audio_in_session_and_goes_on(ws_base):
    import asyncio

    from audio.pcm import pcm16

    update = {"type": "session.update", "session": {"voice": "target", "input_sample_rate": RATE, "seed": 7}}
    pcm = pcm16(INPUT[:9600])
    audio, events = asyncio.run(_socket_session(ws_base, [update, pcm[:4000], {"type": "input_text.append",
                                                                                "text": "Hi."}, b"\x01",
                                                          pcm[4000:], {"type": "input_audio.done"}]))
    errors = [e for e in events if e["type"] == "error"]
    assert [e["code"] for e in errors] == ["mixed_input", "invalid_message"]
    assert events[-1]["type"] == "audio.done" and len(audio) == 5 * 1920 * 2


def test_the_documented_websocket_example_runs(ws_base, tmp_path):
    import asyncio
    import wave

    from clients.audio_in_ws import extract as extract_ws

    with wave.open(str(tmp_path / "in.wav"), "wb") as f:
        f.setnchannels(1), f.setsampwidth(2), f.setframerate(RATE)
        f.writeframes((INPUT[:12000] * 32767).astype("<i2").tobytes())
    event = asyncio.run(extract_ws(ws_base, "target", str(tmp_path / "in.wav"), str(tmp_path / "out.wav"),
                                   piece_ms=40))
    assert event["type"] == "audio.done" and event["sample_rate"] == RATE
    with wave.open(str(tmp_path / "out.wav")) as f:
        assert f.getnframes() == -(-12000 // 1920) * 1920


def test_the_bench_streams_audio_in_at_real_time_and_reports_algorithmic_latency(tse_url, tmp_path):
    """`voxlane bench --audio-in-rate 1`: each request an audio-in session; every request completes with output
    as long as its input, each chunk has an algorithmic latency (arrival less its input's sending), positive."""
    import json
    import subprocess
    import sys

    from clients.bench.records import RequestRecord

    done = subprocess.run([sys.executable, "-m", "server.cli", "bench", "--smoke", "--url", tse_url, "--out",
                           str(tmp_path), "--rates", "1", "--duration", "2", "--audio-in-rate", "1"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "(audio in at 1x real time)" in done.stdout and "algorithmic latency p50/p95" in done.stdout
    results = json.loads((tmp_path / "results.json").read_text())
    records = [RequestRecord.from_json(r) for run in results["runs"] for r in run["records"]]
    assert records and all(r.error is None and r.is_audio_in for r in records)
    for record in records:
        assert record.audio_s == pytest.approx(-(-record.piece_frames[-1] // 1) / 12.5)  # as long as its input
    latency = results["summaries"][0]["algorithmic_latency_ms"]
    assert latency["p50"] is not None and latency["p50"] > 0


def wav_base64(samples: np.ndarray, rate: int) -> str:
    import base64
    import io
    import wave

    from audio.pcm import pcm16
    with io.BytesIO() as buffer:
        with wave.open(buffer, "wb") as out:
            out.setnchannels(1), out.setsampwidth(2), out.setframerate(rate)
            out.writeframes(pcm16(samples))
        return base64.b64encode(buffer.getvalue()).decode()


def test_the_websocket_takes_the_enrollment_inline_and_speaks_as_grpc_with_that_enrollment(ws_base, tse_url):
    """`ref_audio` (a base64 WAV) with `x_vector_only` in session.update is the target speaker's enrollment, as
    `POST /v1/audio/speech` takes a reference: the same audio as a gRPC client sending that clip (16-bit, as the WAV
    holds it), with the same seed."""
    import asyncio

    from audio.pcm import pcm16
    from tests.audio_decode import assert_same_pcm16

    as_sent = np.frombuffer(pcm16(ENROLL), "<i2").astype(np.float32) / 32768.0  # the enrollment the WAV holds
    heard = np.frombuffer(pcm16(INPUT), "<i2").astype(np.float32) / 32768.0
    direct = np.frombuffer(pcm16(stream_audio_in(tse_url, [heard], RATE, as_sent, RATE, seed=7,
                                                 timeout_s=60).audio), "<i2")
    update = {"type": "session.update", "session": {"input_sample_rate": RATE, "seed": 7, "x_vector_only": True,
                                                    "ref_audio": wav_base64(ENROLL, RATE)}}
    pcm = pcm16(INPUT)
    audio, events = asyncio.run(_socket_session(ws_base, [update, pcm[:20000], pcm[20000:],
                                                          {"type": "input_audio.done"}]))
    assert events[-1]["type"] == "audio.done" and not [e for e in events if e["type"] == "error"], events
    assert_same_pcm16(np.frombuffer(audio, "<i2"), direct)


def test_an_audio_in_session_without_an_enrollment_is_refused_naming_what_the_socket_takes(ws_base):
    import asyncio

    from audio.pcm import pcm16

    update = {"type": "session.update", "session": {"input_sample_rate": RATE, "seed": 7}}
    audio, events = asyncio.run(_socket_session(ws_base, [update, pcm16(INPUT[:9600]), {"type": "input_audio.done"}]))
    error = events[-1]  # the session's refusal ends it; its pieces, sent meanwhile, may be refused before it
    assert (error["type"], error["code"], error["param"]) == ("error", "missing_ref_audio", "ref_audio") and not audio
    assert {e["code"] for e in events[:-1]} <= set(PIECE_ERROR_CODES), events
    for field in ("'voice'", "'ref_audio'", "'x_vector_only'"):
        assert field in error["message"], error["message"]
