"""Streaming text in through the gateway's WebSocket (`GET /v1/audio/speech/stream`), a real gateway
process in front of a real tritonserver: word by word, faster and slower than spoken, gives the gRPC
whole-text audio; audio comes before the text is closed; `wav` starts with its header; bad messages and
a refused piece get error events while the session goes on; closing the socket cancels the Triton
stream; a session whose text stops ends after its idle timeout while another goes on."""
from __future__ import annotations

import asyncio
import json
import struct
import urllib.request
import wave
from contextlib import asynccontextmanager

import aiohttp
import numpy as np
import pytest

from audio.pcm import pcm16
from clients.stream import synthesize
from clients.text_stream_ws import speak_words
from tests.audio_decode import assert_same_pcm16
from tests.e2e.test_cancel import wait_for
from tests.e2e.test_metrics import scrape

TEXT = "Get the trust fund to the bank early."
SETTINGS = dict(seed=11, max_audio_seconds=1.6, ignore_eos=True)
TIMEOUT_S = 60.0  # for any one message: generous, never a measure


@pytest.fixture(scope="module")
def base(gateway) -> str:
    return gateway.url.replace("http://", "ws://")


@pytest.fixture(scope="module")
def whole(url) -> np.ndarray:
    """The whole text over Triton's gRPC stream, quantised as the gateway does."""
    return np.frombuffer(pcm16(synthesize(url, TEXT, **SETTINGS).audio), "<i2")


@asynccontextmanager
async def socket(base: str):
    async with aiohttp.ClientSession() as http, http.ws_connect(base + "/v1/audio/speech/stream") as ws:
        yield ws


async def receive(ws) -> bytes | dict | None:
    """The next message: audio bytes, an event, or None once the gateway has closed the socket."""
    message = await ws.receive(TIMEOUT_S)
    if message.type is aiohttp.WSMsgType.BINARY:
        return message.data
    if message.type is aiohttp.WSMsgType.TEXT:
        return json.loads(message.data)
    return None


async def receive_rest(ws) -> tuple[bytes, list[dict]]:
    """(the audio, the events) until the gateway closes the socket."""
    audio, events = bytearray(), []
    while (message := await receive(ws)) is not None:
        if isinstance(message, bytes):
            audio += message
        else:
            events.append(message)
    return bytes(audio), events


def start(**session) -> dict:
    return {"type": "session.update", "session": {**SETTINGS, **session}}


def append(text: str) -> dict:
    return {"type": "input_text.append", "text": text}


DONE = {"type": "input_text.done"}


def pcm(data: bytes) -> np.ndarray:
    return np.frombuffer(data, "<i2")


def errors(events: list[dict]) -> list[tuple[str, str | None]]:
    return [(e["code"], e["param"]) for e in events if e["type"] == "error"]


@pytest.mark.parametrize("words_per_s", [0, 4], ids=["faster-than-spoken", "slower-than-spoken"])
def test_the_documented_example_word_by_word_gives_the_grpc_audio(base, whole, tmp_path, words_per_s):
    done = asyncio.run(speak_words(base, TEXT, str(tmp_path / "out.wav"), words_per_s, **SETTINGS))
    with wave.open(str(tmp_path / "out.wav")) as reader:
        assert (reader.getnchannels(), reader.getsampwidth(), reader.getframerate()) == (1, 2, 24000)
        assert_same_pcm16(pcm(reader.readframes(reader.getnframes())), whole)
    assert done["audio_seconds"] == pytest.approx(1.6) and done["num_chunks"] >= 2


def test_audio_comes_before_the_text_is_closed(base, whole):
    async def run():
        async with socket(base) as ws:
            await ws.send_json(start())
            for i, word in enumerate(TEXT.split(" ")):
                await ws.send_json(append(word if i == 0 else " " + word))
            first = await receive(ws)  # input_text.done is not sent until audio has come
            await ws.send_json(DONE)
            return first, *await receive_rest(ws)

    first, rest, events = asyncio.run(run())
    assert isinstance(first, bytes), first
    assert_same_pcm16(pcm(first + rest), whole)
    assert [e["type"] for e in events] == ["audio.done"]


def test_wav_starts_with_its_header_in_the_first_message(base, whole):
    async def run():
        async with socket(base) as ws:
            await ws.send_json(start(response_format="wav"))
            await ws.send_json(append(TEXT))
            await ws.send_json(DONE)
            return await receive(ws), *await receive_rest(ws)

    first, rest, events = asyncio.run(run())
    riff, _, wave_id, fmt, _, audio_format, channels, rate, _, _, bits, data, size = struct.unpack(
        "<4sI4s4sIHHIIHH4sI", first[:44])
    assert (riff, wave_id, fmt, data, size) == (b"RIFF", b"WAVE", b"fmt ", b"data", 0xFFFFFFFF)
    assert (audio_format, channels, rate, bits) == (1, 1, 24000, 16)
    assert_same_pcm16(pcm(first[44:] + rest), whole)
    assert events[-1]["type"] == "audio.done"


def test_bad_messages_get_error_events_and_the_socket_stays_usable(base, whole):
    async def run():
        async with socket(base) as ws:
            await ws.send_str("{not json")
            await ws.send_json({"type": "response.create"})
            await ws.send_json(start(seed="eleven"))
            await ws.send_json(start())
            await ws.send_json(append("Get the trust"))
            await ws.send_json(start(seed=12))  # the settings are fixed once text came
            await ws.send_json(append(" fund to the bank early."))
            await ws.send_json(DONE)
            return await receive_rest(ws)

    audio, events = asyncio.run(run())
    assert errors(events) == [("invalid_json", None), ("unknown_type", "type"), ("invalid_value", "seed"),
                              ("session_started", None)]
    assert_same_pcm16(pcm(audio), whole)  # with seed 11: the refused update changed nothing
    assert events[-1]["type"] == "audio.done"


def test_an_oversized_piece_is_refused_and_the_session_goes_on(base, whole):
    async def run():
        async with socket(base) as ws:
            await ws.send_json(start())
            for piece in ("Get the trust", " fund" * 4100, " fund to the bank early."):  # 20,500 characters: over the limit
                await ws.send_json(append(piece))
            await ws.send_json(DONE)
            return await receive_rest(ws)

    audio, events = asyncio.run(run())
    assert errors(events) == [("bad_piece", "text")]
    assert "the limit is 20000" in events[0]["message"]
    assert_same_pcm16(pcm(audio), whole)
    assert events[-1]["type"] == "audio.done"


def test_closing_the_socket_mid_stream_cancels_the_triton_stream(base, gateway, server):
    idle = scrape(server)["voxlane_live_requests"]

    async def run():
        async with socket(base) as ws:
            await ws.send_json(start(seed=3, max_audio_seconds=60.0))
            await ws.send_json(append(TEXT))  # the text stays open
            assert isinstance(await receive(ws), bytes)  # the first chunk: the session is live in the LM
            return scrape(server)["voxlane_live_requests"]

    assert asyncio.run(run()) == idle + 1
    # 60 s of audio would take the tiny LM much longer, and the open text 30 s more: the stream must end at once
    assert_ends(server, gateway, idle)


def test_closing_the_socket_while_the_session_waits_for_text_cancels_it(base, gateway, server):
    """No audio is being written when the client goes: only the socket's close can end the stream."""
    idle = scrape(server)["voxlane_live_requests"]

    def is_live() -> bool:
        return scrape(server)["voxlane_live_requests"] == idle + 1

    async def run():
        async with socket(base) as ws:
            await ws.send_json(start())
            await ws.send_json(append(" "))  # a session with nothing to speak yet: no audio comes
            return await asyncio.to_thread(wait_for, is_live, 10)

    assert asyncio.run(run())
    assert_ends(server, gateway, idle)  # well before the server's 30 s idle timeout


def assert_ends(server, gateway, idle: float) -> None:
    assert wait_for(lambda: scrape(server)["voxlane_live_requests"] == idle, timeout_s=10)
    assert wait_for(lambda: _health(gateway)["servers"][0]["live_streams"] == 0, timeout_s=10)


def test_a_session_whose_text_stops_ends_with_an_error_while_another_goes_on(base, gateway, whole, tmp_path):
    async def stalled():
        async with socket(base) as ws:
            await ws.send_json(start(text_idle_timeout_s=1.5))
            await ws.send_json(append("Get the trust"))  # then nothing more
            return await receive_rest(ws)

    async def run():
        return await asyncio.gather(stalled(), speak_words(base, TEXT, str(tmp_path / "other.wav"), 4, **SETTINGS))

    (_, events), done = asyncio.run(run())
    assert errors(events) == [("text_idle_timeout", None)] and events[-1]["type"] == "error"
    assert "1.5 s" in events[-1]["message"]
    with wave.open(str(tmp_path / "other.wav")) as reader:
        assert_same_pcm16(pcm(reader.readframes(reader.getnframes())), whole)
    assert done["audio_seconds"] == pytest.approx(1.6)
    assert wait_for(lambda: _health(gateway)["servers"][0]["live_streams"] == 0, timeout_s=10)


@pytest.mark.parametrize("messages, error", [
    ([DONE], ("bad_input", "text")),  # no text at all: the server's "nothing to speak"
    ([start(text_idle_timeout_s=600.0), append(TEXT), DONE], ("bad_input", "text_idle_timeout_s")),  # over its ceiling
])
def test_a_session_the_server_refuses_ends_with_its_error(base, messages, error):
    async def run():
        async with socket(base) as ws:
            for message in messages:
                await ws.send_json(message)
            return await receive_rest(ws)

    audio, events = asyncio.run(run())
    assert audio == b"" and [(e["code"], e["param"]) for e in events] == [error]


def _health(gateway) -> dict:
    return json.load(urllib.request.urlopen(gateway.url + "/health", timeout=5))
