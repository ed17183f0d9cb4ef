"""Word timestamps, `speed` and barge-in (issue 33) through a real tritonserver, over gRPC, the gateway's SSE and
its WebSocket:

- `timestamps` "word": the chunks' `word_timestamps` name every word of the text once, in order, each inside the
  audio sent by its chunk; asked for nothing, no chunk carries them; every family's stream does it;
- `speed`: the audio lasts its length over the speed at the same seed, the words' times shrink with it, a speed
  outside 0.25-4 is refused by name;
- barge-in: `response.cancel` on the WebSocket stops the utterance, frees its LM row, answers the audio time
  reached and the last word spoken there, and the same socket speaks the next utterance.
"""
from __future__ import annotations

import asyncio
import base64
import json
import socket
import time

import aiohttp
import httpx
import numpy as np
import pytest

from clients.stream import StreamError, synthesize
from tests.e2e.test_metrics import scrape
from tests.waiting import wait_for

TEXT = "Get the trust fund to the bank early, then wait for the call."
SEEDED = dict(seed=5, max_audio_seconds=3.0, ignore_eos=True)
MODEL = "qwen3-tts-tiny"


def assert_words_follow_the_audio(chunks, text: str) -> list[dict]:
    """Every word once, in order, start <= end, none after the audio its chunk ended."""
    words, sent_s = [], 0.0
    for chunk in chunks:
        sent_s += chunk.audio.size / chunk.sample_rate
        assert chunk.words is not None
        assert all(w["end"] <= sent_s + 0.002 for w in chunk.words), (chunk.index, chunk.words)
        words += chunk.words
    assert [w["word"] for w in words] == text.split()
    assert all(0 <= w["start"] <= w["end"] for w in words)
    assert all(a["end"] <= b["start"] + 0.002 for a, b in zip(words, words[1:]))
    return words


def test_word_timestamps_ride_the_chunks_over_grpc_and_only_when_asked(url):
    result = synthesize(url, TEXT, timestamps="word", max_audio_seconds=30.0, seed=5)
    words = assert_words_follow_the_audio(result.chunks, TEXT)
    assert words[-1]["end"] <= result.audio_seconds + 0.002
    plain = synthesize(url, TEXT, **SEEDED)
    assert all(chunk.words is None for chunk in plain.chunks) and plain.words is None


def test_a_stream_cut_by_its_length_names_only_the_words_it_reached(url):
    result = synthesize(url, TEXT, timestamps="word", seed=5, max_audio_seconds=1.0, ignore_eos=True)
    words = result.words
    assert 0 < len(words) < len(TEXT.split())
    assert [w["word"] for w in words] == TEXT.split()[:len(words)]
    assert words[-1]["end"] <= 1.0 + 0.002


def test_every_family_times_its_words(family):
    result = synthesize(family.url, TEXT, timestamps="word", seed=3, max_audio_seconds=30.0)
    assert_words_follow_the_audio(result.chunks, TEXT)


def test_a_bad_timestamps_value_is_refused_by_name(url):
    with pytest.raises(StreamError, match="timestamps"):
        synthesize(url, TEXT, timestamps="phoneme", **SEEDED)


@pytest.mark.parametrize("speed", [0.5, 2.0])
def test_speed_stretches_the_audio_and_its_word_times_at_the_same_seed(url, speed):
    plain = synthesize(url, TEXT, timestamps="word", **SEEDED)
    fast = synthesize(url, TEXT, timestamps="word", speed=speed, **SEEDED)
    assert fast.audio_seconds == pytest.approx(plain.audio_seconds / speed, rel=0.03)
    assert len(fast.chunks) >= len(plain.chunks)  # audio comes chunk by chunk, not all at the end
    for slow_word, fast_word in zip(plain.words, fast.words, strict=True):
        assert fast_word["word"] == slow_word["word"]
        assert fast_word["end"] == pytest.approx(slow_word["end"] / speed, abs=0.002)


@pytest.mark.parametrize("speed", [0.2, 4.5])
def test_a_speed_outside_its_range_is_refused_by_name(url, speed):
    with pytest.raises(StreamError, match="speed"):
        synthesize(url, TEXT, speed=speed, **SEEDED)


# ---- the gateway ------------------------------------------------------------------------------------------------

def post(gateway, **fields) -> httpx.Response:
    body = {"model": MODEL, "input": TEXT, "voice": "alloy", "response_format": "pcm", **SEEDED, **fields}
    return httpx.post(gateway.url + "/v1/audio/speech", json=body, timeout=120)


def sse_events(response: httpx.Response) -> list[dict]:
    return [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]


def test_sse_deltas_carry_their_words_and_raw_audio_cannot(gateway):
    response = post(gateway, stream_format="sse", timestamps="word")
    assert response.status_code == 200, response.text
    deltas = [e for e in sse_events(response) if e["type"] == "speech.audio.delta" and "chunk_index" in e]
    words, sent_s = [], 0.0
    for delta in deltas:
        sent_s += len(base64.b64decode(delta["audio"])) / 2 / 24000
        assert all(w["end"] <= sent_s + 0.002 for w in delta["words"])
        words += delta["words"]
    assert [w["word"] for w in words] == TEXT.split()[:len(words)] and words
    assert "words" not in sse_events(post(gateway, stream_format="sse"))[0]
    refused = post(gateway, timestamps="word")
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "timestamps"
    bad = post(gateway, stream_format="sse", timestamps="syllable")
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "timestamps"


def test_gateway_speed_is_openai_s_field_and_its_range(gateway):
    plain = post(gateway)
    slow = post(gateway, speed=0.5)
    assert plain.status_code == slow.status_code == 200, slow.text
    assert len(slow.content) == pytest.approx(2 * len(plain.content), rel=0.03)
    for speed in (0.1, 5, "fast", True):
        refused = post(gateway, speed=speed)
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "speed", speed


def test_the_sse_example_client_runs_as_documented(gateway):
    """clients/speech_sse.py: every word of the text, inside its audio; at speed 2 and in English, half the audio."""
    from clients.speech_sse import speak_with_words

    whole = dict(seed=5, max_audio_seconds=6.0, ignore_eos=True)  # room for every word (the clock: ~4.4 s)
    pcm, words = speak_with_words(gateway.url, TEXT, MODEL, **whole)
    fast, fast_words = speak_with_words(gateway.url, TEXT, MODEL, speed=2.0, language="English", **whole)
    assert [w["word"] for w in words] == [w["word"] for w in fast_words] == TEXT.split()
    assert words[-1]["end"] <= len(pcm) / 2 / 24000 + 0.002 and fast_words[-1]["end"] <= len(fast) / 2 / 24000 + 0.002
    assert len(fast) == pytest.approx(len(pcm) / 2, rel=0.03)


def ws_url(gateway) -> str:
    return gateway.url.replace("http://", "ws://") + "/v1/audio/speech/stream"


async def next_event(ws) -> tuple[dict | None, bytes | None]:
    message = await ws.receive(timeout=60)
    if message.type is aiohttp.WSMsgType.TEXT:
        return json.loads(message.data), None
    if message.type is aiohttp.WSMsgType.BINARY:
        return None, message.data
    return {"type": f"closed:{message.type}"}, None


LM_ROWS = "voxlane_lm_live_streams"  # streams holding an LM slot, as the LM lane's loop last published them


def codec_calls(server) -> float:
    """The router's codec calls so far, on every codec lane."""
    return sum(v for k, v in scrape(server).items() if k.startswith("voxlane_codec_ms_count"))


def codec_calls_after_the_cancel(server) -> tuple[float, float]:
    """The codec calls at the start and at the end of a second once the cancelled stream's row is free: equal
    when its codec work stopped (a stream left running makes a chunk every few hundred ms of its 150 s)."""
    time.sleep(0.3)  # a decode already running when the cancel came finishes (its audio dropped)
    before = codec_calls(server)
    time.sleep(1.0)
    return before, codec_calls(server)


def is_quiet(server) -> bool:
    """No stream in the router or the LM lane: a stream of an earlier test on this shared server (a listener
    gone, its stream ending on its stall timeout) would move the counts this test reads."""
    metrics = scrape(server)
    return metrics["voxlane_live_requests"] == 0 and metrics[LM_ROWS] == 0


def small_receive_buffer(addr_info) -> socket.socket:
    """A client socket that buffers 64 KiB, about what a listener playing its audio holds. With the kernel's receive
    autotuning (up to net.ipv4.tcp_rmem's maximum, 32 MiB on some hosts) a client that stopped reading could take
    the whole 150 s utterance into its buffers before its cancel, so the utterance ended before its barge-in."""
    family, kind, proto, _, _ = addr_info
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    return sock


async def barge_in(gateway, server) -> dict:
    assert await asyncio.to_thread(wait_for, lambda: is_quiet(server), 60), f"the server is not idle: {scrape(server)}"
    idle, idle_rows, idle_calls = scrape(server)["voxlane_live_requests"], scrape(server)[LM_ROWS], codec_calls(server)
    connector = aiohttp.TCPConnector(socket_factory=small_receive_buffer)
    async with aiohttp.ClientSession(connector=connector) as http, http.ws_connect(ws_url(gateway)) as ws:
        await ws.send_json({"type": "response.cancel"})
        nothing, _ = await next_event(ws)
        await ws.send_json({"type": "session.update", "session": {"seed": 5, "timestamps": "word",
                                                                  "max_audio_seconds": 150.0, "ignore_eos": True}})
        await ws.send_json({"type": "input_text.append", "text": TEXT})
        await ws.send_json({"type": "input_text.done"})
        audio_s, words = 0.0, []
        while audio_s < 1.5:  # past a few words, far from the utterance's end (150 s: the tiny model writes
            # 60 s in a few seconds, and on a loaded machine the cancel below came after that end)
            event, data = await next_event(ws)
            audio_s += len(data) / 2 / 24000 if data else 0.0
            words += event["words"] if event and event["type"] == "audio.words" else []
        live_during = scrape(server)["voxlane_live_requests"]
        row_held = await asyncio.to_thread(wait_for, lambda: scrape(server)[LM_ROWS] == idle_rows + 1, 10)
        await ws.send_json({"type": "response.cancel", "audio_end_ms": 900})
        while (event := (await next_event(ws))[0]) is None or event["type"] == "audio.words":
            pass
        cancelled = event
        freed = await asyncio.to_thread(
            wait_for, lambda: scrape(server)["voxlane_live_requests"] == idle, 10)
        row_freed = await asyncio.to_thread(wait_for, lambda: scrape(server)[LM_ROWS] == idle_rows, 10)
        codec_after = await asyncio.to_thread(codec_calls_after_the_cancel, server)
        await ws.send_json({"type": "input_text.append", "text": "And now the next one."})
        await ws.send_json({"type": "input_text.done"})
        later, num_audio = [], 0
        while True:
            event, data = await next_event(ws)
            num_audio += data is not None
            if event is not None:
                later.append(event)
                if event["type"] in ("audio.done", "error") or event["type"].startswith("closed"):
                    break
    return dict(nothing=nothing, live_during=live_during - idle, words=words, cancelled=cancelled, freed=freed,
                row_held=row_held, row_freed=row_freed, codec_calls=(idle_calls, *codec_after), later=later,
                num_audio=num_audio)


def test_barge_in_stops_the_utterance_frees_its_row_and_keeps_the_socket(gateway, server):
    got = asyncio.run(barge_in(gateway, server))
    assert got["nothing"]["type"] == "error" and got["nothing"]["code"] == "no_response"
    assert got["live_during"] == 1 and got["freed"]  # the router's stream held during the utterance is gone
    assert got["row_held"] and got["row_freed"]  # its LM row too (the LM lane's own count of slots held)
    idle_calls, at_cancel, a_second_later = got["codec_calls"]
    assert idle_calls < at_cancel == a_second_later  # its codec work ran, and stopped with it
    cancelled = got["cancelled"]
    assert cancelled["type"] == "response.cancelled"
    assert cancelled["audio_seconds"] == 0.9 and cancelled["audio_sent_seconds"] >= 1.5
    spoken = [w for w in got["words"] if w["start"] < 0.9]
    assert spoken and cancelled["last_word"] == spoken[-1]["word"] and cancelled["words_spoken"] == len(spoken)
    assert got["later"][-1]["type"] == "audio.done" and got["num_audio"] > 0  # the next utterance, same socket
    assert [e["type"] for e in got["later"][:-1]] and all(e["type"] == "audio.words" for e in got["later"][:-1])


def test_the_barge_in_example_client_runs_as_documented(gateway):
    from clients.barge_in_ws import speak_then_barge_in

    got = asyncio.run(speak_then_barge_in(ws_url(gateway), TEXT, "Sure.", cut_after_s=1.2, seed=2,
                                          max_audio_seconds=30.0, ignore_eos=True))
    cancelled, heard = got["cancelled"], [w["word"] for w in got["words_heard"]]
    assert cancelled["audio_seconds"] == 1.2 and heard == TEXT.split()[:len(heard)]
    # a word's times come with the chunk that ends it: the server may know a started word the client has not seen
    assert cancelled["words_spoken"] >= len(heard) and cancelled["last_word"] == TEXT.split()[cancelled["words_spoken"] - 1]
    assert got["next"]["num_chunks"] > 0
