"""Streaming text in against a real tritonserver (the default Qwen3-TTS server): a session's text word by
word, faster or slower than it is spoken, gives the whole text's audio; audio starts before the text is
closed; a session whose text stops coming ends after its idle timeout while other streams go on; bad
pieces, pieces after the end and pieces of unknown sessions each get a clear answer."""
from __future__ import annotations

import queue
import threading
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from clients.stream import StreamError, build_inputs, synthesize
from clients.text_stream import speak_streaming_text
from protocol.models import ROUTER
from protocol.reasons import EndReason
from protocol.wire import decode_error

TEXT = "Get the trust fund to the bank early."
SETTINGS = dict(seed=11, max_audio_seconds=1.6, ignore_eos=True)
PATH_ROUNDING = 1e-4  # test_streaming.py: two runs whose chunks took different codec paths differ by this


def words(text: str, pause_s: float = 0.0):
    for i, word in enumerate(text.split(" ")):
        if i and pause_s:
            time.sleep(pause_s)
        yield word if i == 0 else " " + word


def assert_same_audio(first, second) -> None:
    assert [c.index for c in first.chunks] == [c.index for c in second.chunks]
    if [c.lane for c in first.chunks] == [c.lane for c in second.chunks]:
        np.testing.assert_array_equal(first.audio, second.audio)
    else:  # routed differently (by timing): the same frames, decoded by the two paths
        np.testing.assert_allclose(first.audio, second.audio, rtol=0, atol=PATH_ROUNDING)


@pytest.fixture(scope="module")
def whole(url):
    return synthesize(url, TEXT, **SETTINGS)


@pytest.mark.parametrize("pause_s", [0.0, 0.25], ids=["faster-than-spoken", "slower-than-spoken"])
def test_text_word_by_word_gives_the_whole_texts_audio(url, whole, pause_s):
    streamed = speak_streaming_text(url, words(TEXT, pause_s), **SETTINGS)
    assert streamed.piece_errors == []
    assert_same_audio(streamed, whole)
    if pause_s:  # 8 words over 1.75 s: the first chunk needs only the first few
        assert streamed.ttfa_s < streamed.text_done_s


def test_thousands_of_tiny_and_empty_pieces_and_a_split_character(url):
    text = "Get the trust fund to the bank early, 5 €."
    pieces = [p for char in text.encode() for p in (bytes([char]), b"")] * 1  # byte by byte: € split in three
    pieces += [b""] * 1500
    streamed = speak_streaming_text(url, pieces, **SETTINGS)
    assert streamed.piece_errors == []
    assert_same_audio(streamed, synthesize(url, text, **SETTINGS))


def test_a_bad_piece_is_refused_and_the_session_goes_on(url, whole):
    pieces = ["Get the trust", b"\xff bad", " fund\x07", " fund to the bank early."]
    streamed = speak_streaming_text(url, pieces, **SETTINGS)
    assert [e.code for e in streamed.piece_errors] == ["bad_piece", "bad_piece"]
    assert "piece 1 of session" in streamed.piece_errors[0].message and "not valid UTF-8" in streamed.piece_errors[0].message
    assert "U+0007" in streamed.piece_errors[1].message
    assert_same_audio(streamed, whole)  # the refused pieces changed nothing


def test_a_session_whose_text_stops_ends_after_its_idle_timeout_and_others_go_on(url):
    resume = threading.Event()

    def stalled():
        yield "Get the trust"
        resume.wait(20)  # the text stops coming

    started = time.perf_counter()
    with pytest.raises(StreamError) as raised:
        other = threading.Thread(target=lambda: results.append(synthesize(url, TEXT, **SETTINGS)))
        results: list = []
        other.start()
        speak_streaming_text(url, stalled(), text_idle_timeout_s=0.5, **SETTINGS)
    resume.set()
    elapsed = time.perf_counter() - started
    ended = raised.value.ended
    assert ended.reason is EndReason.CANCELLED and ended.code == "text_idle_timeout" and "0.5 s" in ended.message
    assert elapsed < 8.0  # well before the server's 30 s: the request's own timeout held
    other.join(30)
    assert results and results[0].audio_seconds == pytest.approx(1.6)


def test_a_timeout_above_the_servers_ceiling_is_refused(url):
    with pytest.raises(StreamError) as raised:
        speak_streaming_text(url, ["Hello."], text_idle_timeout_s=60.0)
    assert raised.value.ended.param == "text_idle_timeout_s"


def test_pieces_after_the_end_and_of_unknown_sessions_with_plain_tritonclient(url):
    """The contract as a tritonclient user sees it: one gRPC stream, one sequence_id per session."""
    client = grpcclient.InferenceServerClient(url=url)
    answers: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        client.async_stream_infer(ROUTER, build_inputs("x", seed=1), request_id="late", sequence_id=424242)
        _, error = answers.get(timeout=10)
        assert decode_error(error.message()).code == "unknown_session"
        client.async_stream_infer(ROUTER, build_inputs("Hello", seed=1, max_audio_seconds=0.4, ignore_eos=True),
                                  request_id="main", sequence_id=77, sequence_start=True,
                                  enable_empty_final_response=True)
        client.async_stream_infer(ROUTER, build_inputs(" there."), request_id="p1", sequence_id=77,
                                  enable_empty_final_response=True)
        client.async_stream_infer(ROUTER, build_inputs(""), request_id="p2", sequence_id=77, sequence_end=True,
                                  enable_empty_final_response=True)
        client.async_stream_infer(ROUTER, build_inputs("more"), request_id="p3", sequence_id=77)
        finals, errors, chunks = set(), [], 0
        while "main" not in finals:
            result, error = answers.get(timeout=20)
            if error is not None:
                errors.append(decode_error(error.message()))
                continue
            response = result.get_response()
            chunks += result.as_numpy("audio") is not None and response.id == "main"
            if response.parameters["triton_final_response"].bool_param:
                finals.add(response.id)
        assert {"p1", "p2"} <= finals  # each piece answered with an empty final response
        assert chunks >= 1
        assert [e.code for e in errors] == ["session_closed"]  # the piece after sequence_end
    finally:
        client.stop_stream(cancel_requests=True)
        client.close()
