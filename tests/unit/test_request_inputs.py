"""The request contract's parser, without a server."""
from __future__ import annotations

import json

import numpy as np
import pytest

from backend_python.stub_common.request_inputs import (RequestError, RequestLimits, check_request_parameters,
                                                  parse_speech_request)
from protocol.tensors import INPUT_NAMES

LIMITS = RequestLimits(max_text_chars=50, max_audio_seconds=30.0, default_audio_seconds=10.0)


def parse(**inputs):
    arrays = {k: v if isinstance(v, np.ndarray) else np.array([v]) for k, v in inputs.items()}
    return parse_speech_request(arrays.get, LIMITS)


def test_defaults():
    req = parse(text=np.array([b"  Hello there. "], dtype=object))
    assert req.text == "Hello there." and req.voice is None and req.seed is None
    assert req.max_audio_seconds == 10.0 and req.ignore_eos is False


def test_values_pass_through():
    req = parse(text=np.array([b"Hi"], dtype=object), voice=np.array([b"tiny"], dtype=object),
                temperature=np.float32(0.5), top_k=np.int32(7), seed=np.int64(42), ignore_eos=np.bool_(True))
    assert (req.voice, req.temperature, req.top_k, req.seed, req.ignore_eos) == ("tiny", 0.5, 7, 42, True)


@pytest.mark.parametrize("inputs, message", [
    (dict(), "missing required input 'text'"),
    (dict(text=np.array([b"a", b"b"], dtype=object)), "exactly one string"),
    (dict(text=np.array([b"\xff\xfe"], dtype=object)), "not valid UTF-8"),
    (dict(text=np.array(["x" * 51], dtype=object)), "limit is 50"),
    (dict(text=np.array([b"tab\tok\x1b"], dtype=object)), r"U\+001B"),
    (dict(text=np.array([b"Hi"], dtype=object), top_p=np.float32(np.inf)), "top_p"),
    (dict(text=np.array([b"Hi"], dtype=object), max_audio_seconds=np.float32(31)), "max_audio_seconds"),
    (dict(text=np.array([b"Hi"], dtype=object), seed=np.array([1, 2])), "exactly one value"),
])
def test_rejections_name_the_problem(inputs, message):
    with pytest.raises(RequestError, match=message):
        parse(**inputs)


def test_a_long_text_without_max_audio_seconds_gets_room_to_be_read_slowly_within_the_ceiling():
    limits = RequestLimits(max_text_chars=30_000, max_audio_seconds=1800.0, default_audio_seconds=60.0)

    def cap(text: str, **inputs) -> float:
        return parse_speech_request({"text": np.array([text], dtype=object), **inputs}.get, limits).max_audio_seconds

    assert cap("Short.") == 60.0
    assert cap("x" * 1400) == 200.0  # 7 characters per second, half the usual rate
    assert cap("x" * 20_000) == 1800.0
    assert cap("x" * 1400, max_audio_seconds=np.array([5.0], dtype=np.float32)) == 5.0  # a request's own cap wins


def test_limits_from_model_parameters():
    limits = RequestLimits.from_parameters({"max_text_chars": "10", "max_audio_seconds": "90"})
    assert (limits.max_text_chars, limits.max_audio_seconds) == (10, 90.0)
    assert RequestLimits.from_parameters({}) == RequestLimits()


@pytest.mark.parametrize("text", ["\u200b", "\ufeff", " \u200b\ufeff\u2060 ", "\u200d\u3000"])
def test_text_with_no_speakable_character_is_empty(text):
    with pytest.raises(RequestError, match="empty"):
        parse(text=np.array([text.encode()], dtype=object))


def test_invisible_characters_beside_speakable_ones_pass():
    assert parse(text=np.array(["\ufeffHi\u200b".encode()], dtype=object)).text == "\ufeffHi\u200b"


def test_the_documented_top_p_minimum_is_accepted_as_float32():
    assert parse(text=np.array([b"Hi"], dtype=object), top_p=np.float32(1e-6)).top_p == pytest.approx(1e-6)
    with pytest.raises(RequestError, match="top_p"):
        parse(text=np.array([b"Hi"], dtype=object), top_p=np.float32(9e-7))


def test_a_long_unknown_parameter_is_quoted_short():
    with pytest.raises(RequestError) as caught:
        check_request_parameters(json.dumps({"x" * 10_000: 1}))
    listed = len(", ".join(INPUT_NAMES))  # the message ends with the inputs' names
    assert len(str(caught.value)) - listed < 200 and "10000 characters" in str(caught.value)


def test_prompt_options_are_read_stripped_language_as_the_client_spelled_it():
    req = parse(text=np.array([b"Hi"], dtype=object), language=np.array([b" English "], dtype=object),
                instructions=np.array(["  Calm. ".encode()], dtype=object), non_streaming_mode=np.bool_(True))
    assert (req.language, req.instructions, req.non_streaming_mode) == ("English", "Calm.", True)
    plain = parse(text=np.array([b"Hi"], dtype=object), language=np.array([b" "], dtype=object))
    assert (plain.language, plain.instructions, plain.non_streaming_mode) == (None, "", False)


@pytest.mark.parametrize("inputs, param", [
    (dict(language=np.array([b"\xff"], dtype=object)), "language"),
    (dict(instructions=np.array([b"calm\x07"], dtype=object)), "instructions"),
    (dict(instructions=np.array(["x" * 51], dtype=object)), "instructions"),
])
def test_bad_prompt_options_are_named(inputs, param):
    with pytest.raises(RequestError) as info:
        parse(text=np.array([b"Hi"], dtype=object), **inputs)
    assert info.value.param == param


def test_the_parsed_request_travels_to_the_lm_lane_whole_and_a_form_that_does_not_fit_is_refused():
    """The router parses once and passes the typed request on (`speech_request`): every field arrives as parsed."""
    from backend_python.stub_common.request_inputs import SpeechRequest

    req = parse(text=np.array([b"Hi there."], dtype=object), seed=np.int64(-7),
                language=np.array([b"English"], dtype=object), timestamps=np.array([b"word"], dtype=object),
                instructions=np.array([b"Calm."], dtype=object))
    assert (req.seed, req.language, req.word_timestamps, req.instructions) == (-7, "English", True, "Calm.")
    assert SpeechRequest.from_json(req.to_json()) == req
    for bad in ("not json", "[1, 2]", '{"text": "Hi.", "colour": "red"}', '{"text": "Hi."}'):
        with pytest.raises(ValueError, match="speech_request"):
            SpeechRequest.from_json(bad)


def test_a_sessions_start_earns_the_audio_cap_a_whole_text_would_when_the_client_gives_none():
    from backend_python.stub_common.request_inputs import with_start_text

    limits = RequestLimits(max_text_chars=5000, max_audio_seconds=600.0, default_audio_seconds=10.0)
    opened = parse_speech_request({}.get, limits, is_text_open=True)
    start = "word " * 40  # 200 characters: 28.6 s at the slow rate, over the 10-s default
    assert with_start_text(opened, start, limits, is_cap_given=False).max_audio_seconds == pytest.approx(200 / 7)
    assert with_start_text(opened, "Hi.", limits, is_cap_given=False).max_audio_seconds == 10.0
    given = parse_speech_request({"max_audio_seconds": np.array([5.0], np.float32)}.get, limits, is_text_open=True)
    assert with_start_text(given, start, limits, is_cap_given=True).max_audio_seconds == 5.0
    assert with_start_text(given, start, limits, is_cap_given=True).text == start
