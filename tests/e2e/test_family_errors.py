"""The error contract, once per model family: a bad request gets one clear error at once and
the family's server keeps serving (the full list of bad inputs is in test_errors.py); the peers' fields
(`language`, `instructions`, `non_streaming_mode`) a family cannot take are refused by name."""
from __future__ import annotations

import re
import time

import pytest

from clients.stream import StreamError, synthesize

BAD_REQUESTS = [
    pytest.param(dict(text="   "), "empty", id="whitespace"),
    pytest.param(dict(text="a" * 20_001), "limit is 20000", id="too-long"),
    pytest.param(dict(text="Hi.", temperature=-1.0), "temperature", id="negative-temperature"),
    pytest.param(dict(text="Hi.", voice="nobody"), "nobody", id="unknown-voice"),
]


@pytest.mark.parametrize("request_kwargs, message", BAD_REQUESTS)
def test_bad_input_is_rejected_per_family(family, request_kwargs, message):
    started = time.perf_counter()
    with pytest.raises(StreamError, match=message):
        synthesize(family.url, **request_kwargs)
    assert time.perf_counter() - started < 1.0
    assert synthesize(family.url, "A good request.", seed=2, max_audio_seconds=0.4, ignore_eos=True).chunks


def test_unknown_voice_names_the_known_ones(family):
    with pytest.raises(StreamError, match=re.escape(repr(family.voices[0]))):
        synthesize(family.url, "Hi.", voice="nobody")


def refused_peer_fields(family) -> list[tuple[dict, str, str]]:
    """(fields, the input named, its code) for each peer field value the family's model cannot take."""
    refused = [(dict(language="Klingon"), "language", "unsupported_language")]
    if not family.supports_instructions:
        refused.append((dict(instructions="Whisper."), "instructions", "instructions_unsupported"))
    if not family.supports_text_first:
        refused.append((dict(non_streaming_mode=True), "non_streaming_mode", "unsupported_value"))
    return refused


def test_peer_fields_the_family_cannot_take_are_refused_by_name_and_the_rest_serve(family):
    """`language` outside the model's, `instructions` without an instruct input, `non_streaming_mode` without a
    text-first prompt: one error naming the input, and the server goes on; what the model declares, it takes."""
    for fields, param, code in refused_peer_fields(family):
        with pytest.raises(StreamError) as info:
            synthesize(family.url, "Hi.", **fields)
        assert (info.value.ended.param, info.value.ended.code) == (param, code), (fields, info.value)
    takes = dict(language=(family.languages or ("auto",))[0], instructions="Whisper." if family.supports_instructions
                 else "", non_streaming_mode=family.supports_text_first)
    assert synthesize(family.url, "A good request.", seed=2, max_audio_seconds=0.4, ignore_eos=True, **takes).chunks
