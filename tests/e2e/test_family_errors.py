"""The error contract, once per model family: a bad request gets one clear error at once and
the family's server keeps serving (the full list of bad inputs is in test_errors.py)."""
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
