"""The fields peers' speech APIs take (issue 33), through a real gateway process in front of a real tritonserver
serving the tiny Qwen3-TTS preset:

- the public open-loop harness's request, byte for byte as it builds it for each of its targets (model
  `Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice`, voice `Ryan`, language `English`, `stream` true,
  `non_streaming_mode` false, `pcm` or `wav`, `stream_format` `audio` or none), read as it reads the answer:
  content type, `X-Sample-Rate`, an open-ended WAV, whole 16-bit frames at 24 kHz;
- `stream` false: one response of known length, the same audio as the stream;
- `language`, `instructions` and `non_streaming_mode` change the prompt (the audio differs, same seed), and a
  value the model cannot take is a 400 naming the field; the WebSocket session takes them too.
"""
from __future__ import annotations

import asyncio
import io
import json
import struct
import wave

import aiohttp
import httpx
import numpy as np
import pytest

from server.compare import free_ports
from server.gateway.config import GatewayConfig
from server.gateway.server import GatewayProcess
from tests.audio_decode import assert_same_pcm16

HUB_ID = "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice"  # the harness's default model
TEXT = "Get the trust fund to the bank early."
SEEDED = dict(seed=5, max_audio_seconds=1.2, ignore_eos=True)  # VoxLane's fields: short, reproducible audio
PCM_TYPES = {"audio/pcm", "audio/l16", "application/octet-stream", "audio/raw"}  # what the harness accepts
WAV_TYPES = {"audio/wav", "audio/x-wav", "application/octet-stream"}
# the harness's targets: (response_format, stream_format, the header it reads the rate from, its content types)
TARGETS = {"vllm-omni": ("pcm", "audio", None, PCM_TYPES), "sglang-omni": ("pcm", None, "x-sample-rate", PCM_TYPES),
           "voxserve": ("pcm", None, None, PCM_TYPES), "mstar": ("wav", None, None, WAV_TYPES),
           "nari": ("pcm", None, None, PCM_TYPES)}


@pytest.fixture(scope="module")
def gateway(server, tmp_path_factory):
    """Served as the checkpoint's hub id too, as a server of that checkpoint would be (`--served-model-name`)."""
    config = GatewayConfig(tritons=(server.grpc_url,), port=free_ports(1)[0], served_model_names=(HUB_ID,))
    process = GatewayProcess(config, log_path=tmp_path_factory.mktemp("gateway") / "gateway.log")
    process.wait_ready(60)
    yield process
    process.stop()


def harness_request(target: str, text: str) -> dict:
    """The harness's body for `target` with its defaults (nothing of VoxLane's own)."""
    response_format, stream_format, _, _ = TARGETS[target]
    body = {"model": HUB_ID, "input": text, "voice": "Ryan", "language": "English", "stream": True,
            "non_streaming_mode": False, "response_format": response_format}
    return body if stream_format is None else {**body, "stream_format": stream_format}


async def post_as_the_harness(base: str, target: str) -> tuple[int, dict, list[bytes]]:
    """Health first (the harness's preflight), then the speech request, read piece by piece as it arrives."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
        async with session.get(base + "/health") as health:
            assert 200 <= health.status < 300
        async with session.post(base + "/v1/audio/speech", json=harness_request(target, TEXT)) as response:
            pieces = [piece async for piece in response.content.iter_any()]
            return response.status, {k.lower(): v for k, v in response.headers.items()}, pieces


def pcm_of(raw: bytes, response_format: str) -> bytes:
    """The 16-bit samples, as the harness decodes them: a WAV's header read (sizes open-ended), 24 kHz mono."""
    if response_format == "pcm":
        return raw
    assert raw[:4] == b"RIFF" and raw[8:12] == b"WAVE" and raw[12:16] == b"fmt "
    codec, channels, rate, byte_rate, block, bits = struct.unpack("<HHIIHH", raw[20:36])
    assert (codec, channels, rate, byte_rate, block, bits) == (1, 1, 24000, 48000, 2, 16)
    assert raw[36:40] == b"data"
    return raw[44:]


@pytest.mark.parametrize("target", list(TARGETS))
def test_the_harness_request_streams_audio_as_the_harness_reads_it(gateway, target):
    status, headers, pieces = asyncio.run(post_as_the_harness(gateway.url, target))
    response_format, _, rate_header, content_types = TARGETS[target]
    assert status == 200, b"".join(pieces)[:500]
    assert headers["content-type"].split(";")[0].strip() in content_types
    if rate_header is not None:
        assert headers[rate_header] == "24000"
    pcm = pcm_of(b"".join(pieces), response_format)
    assert len(pcm) > 0 and len(pcm) % 2 == 0  # whole 16-bit frames, not empty


def speak(gateway, **fields) -> httpx.Response:
    body = {"model": HUB_ID, "input": TEXT, "voice": "Ryan", "response_format": "pcm", **SEEDED, **fields}
    return httpx.post(gateway.url + "/v1/audio/speech", json=body, timeout=120)


def audio(gateway, **fields) -> np.ndarray:
    """The 16-bit samples of one `pcm` request."""
    response = speak(gateway, **fields)
    assert response.status_code == 200, response.text
    return np.frombuffer(response.content, "<i2")


def differs(got: np.ndarray, other: np.ndarray) -> bool:
    """More than the rounding of another codec path apart (tests/audio_decode.py: one 16-bit step)."""
    return got.shape != other.shape or np.abs(got.astype(np.int64) - other.astype(np.int64)).max() > 1


def test_stream_false_is_one_whole_file_of_the_streamed_audio(gateway):
    streamed = audio(gateway, stream=True)
    whole = speak(gateway, stream=False, response_format="wav")
    assert whole.status_code == 200 and whole.headers["content-type"] == "audio/wav"
    assert whole.headers["content-length"] == str(len(whole.content))  # not chunked: its length is known
    with wave.open(io.BytesIO(whole.content)) as read:  # the sizes are real: the wave module reads them
        assert read.getframerate() == 24000
        assert_same_pcm16(np.frombuffer(read.readframes(read.getnframes()), "<i2"), streamed)
    assert_same_pcm16(audio(gateway, stream=False), streamed)  # pcm too


def test_stream_false_with_sse_is_refused_by_name(gateway):
    response = speak(gateway, stream=False, stream_format="sse")
    assert response.status_code == 400 and response.json()["error"]["param"] == "stream_format"


def test_voice_names_are_the_checkpoint_s_speakers_in_any_case(gateway):
    ryan = audio(gateway, voice="Ryan")
    assert_same_pcm16(audio(gateway, voice="ryan"), ryan)
    assert differs(audio(gateway, voice="Vivian"), ryan)


def test_language_english_tags_the_prompt_and_auto_is_the_default(gateway):
    auto, english = audio(gateway), audio(gateway, language="English")
    assert_same_pcm16(audio(gateway, language="Auto"), auto)
    assert_same_pcm16(audio(gateway, language="english"), english)
    assert differs(english, auto)


@pytest.mark.parametrize("language", ["French", "beijing_dialect", "klingon"])
def test_a_language_the_model_has_not_is_a_400_naming_it_and_the_allowed_values(gateway, language):
    error = speak(gateway, language=language)
    assert error.status_code == 400, error.text
    body = error.json()["error"]
    assert (body["param"], body["code"]) == ("language", "unsupported_language")
    assert "auto, english" in body["message"]


def test_instructions_reach_the_prompt(gateway):
    plain = audio(gateway)
    assert_same_pcm16(audio(gateway, instructions=""), plain)  # OpenAI's SDK may send an empty string
    assert differs(audio(gateway, instructions="Speak slowly, in a warm and calm voice."), plain)


def test_non_streaming_mode_true_puts_the_whole_text_in_the_prompt(gateway):
    streaming = audio(gateway, non_streaming_mode=False)
    assert_same_pcm16(audio(gateway), streaming)  # false is today's prompt
    text_first = audio(gateway, non_streaming_mode=True)
    assert text_first.size and differs(text_first, streaming)


def test_non_streaming_mode_true_on_a_websocket_session_is_refused_by_name(gateway):
    events = asyncio.run(session(gateway, non_streaming_mode=True))
    assert events[-1]["type"] == "error" and events[-1]["param"] == "non_streaming_mode"


def test_a_websocket_session_takes_language_and_instructions(gateway):
    events = asyncio.run(session(gateway, voice="Ryan", language="English", instructions="Whisper."))
    assert events[-1]["type"] == "audio.done" and events[-1]["num_chunks"] > 0
    bad = asyncio.run(session(gateway, language="French"))
    assert bad[-1]["type"] == "error" and bad[-1]["param"] == "language"


async def session(gateway, **fields) -> list[dict]:
    """One streaming-text session with `fields`: its JSON events until the gateway closes the socket."""
    url = gateway.url.replace("http://", "ws://") + "/v1/audio/speech/stream"
    events = []
    async with aiohttp.ClientSession() as http, http.ws_connect(url) as ws:
        await ws.send_json({"type": "session.update", "session": {**SEEDED, **fields}})
        await ws.send_json({"type": "input_text.append", "text": TEXT})
        await ws.send_json({"type": "input_text.done"})
        async for message in ws:
            if message.type is aiohttp.WSMsgType.TEXT:
                events.append(json.loads(message.data))
    return events
