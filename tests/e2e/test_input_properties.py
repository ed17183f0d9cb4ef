"""Property-based: over arbitrary request tensors, the server answers every request with audio
or an error naming the problem, at once, and stays ready.

Each generated field is either valid or one of the ways it can be wrong, so the test knows what the
answer must be: a request with only valid fields streams audio, any other gets an error.
"""
from __future__ import annotations

import math
import urllib.request

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clients.live_stream import LiveStream, tensor
from tests.e2e.test_cancel import wait_for
from tests.e2e.test_metrics import scrape

MAX_TEXT_CHARS = 20_000
BIG = float(np.float32(1e30))  # the largest magnitude of generated float32 values
# characters the router accepts (no control characters); surrogates cannot be UTF-8 encoded
TEXT_CHARS = st.characters(blacklist_categories=("Cc", "Cs"))


def field(name: str, triton_type: str, dtype, valid: st.SearchStrategy, invalid: st.SearchStrategy,
          only_valid: bool):
    """(InferInput or None, is_valid): absent, a valid value, an invalid value, the wrong dtype or shape."""
    def build(value, wire_type=triton_type, wire_dtype=dtype, shape=(1,)):
        return tensor(name, wire_type, np.full(shape, value, dtype=wire_dtype))

    valid_choices = st.one_of(st.just((None, True)), valid.map(lambda v: (build(v), True)))
    if only_valid:
        return valid_choices
    return st.one_of(
        valid_choices,
        invalid.map(lambda v: (build(v), False)),
        valid.map(lambda v: (build(v, "FP64" if triton_type != "FP64" else "INT64",
                                   np.float64 if triton_type != "FP64" else np.int64), False)),
        st.sampled_from([(2,), (1, 1), (0,)]).flatmap(lambda shape: valid.map(
            lambda v: (build(v, shape=shape), False))),
    )


def f32_at_least(value: float) -> float:
    """The smallest float32 >= value (the server compares the float32 it receives)."""
    x = np.float32(value)
    return float(x if x >= value else np.nextafter(x, np.float32(np.inf)))


def ranged(low: float, high: float) -> tuple[st.SearchStrategy, st.SearchStrategy]:
    """(valid, invalid) float32 values of an input the server accepts in [low, high]."""
    low32, high32 = f32_at_least(low), float(np.float32(high))
    below = float(np.nextafter(np.float32(low32), np.float32(-np.inf)))
    valid = st.floats(low32, high32, width=32, allow_subnormal=False)
    invalid = st.one_of(st.sampled_from([math.nan, math.inf, -math.inf]),
                        st.floats(high32, BIG, exclude_min=True, width=32, allow_subnormal=False),
                        st.floats(-BIG, below, width=32, allow_subnormal=False).filter(lambda v: v < low))
    return valid, invalid


def text_field(only_valid: bool):
    def encoded(text: str) -> np.ndarray:
        return np.array([text.encode("utf-8")], dtype=np.object_)

    valid = st.text(TEXT_CHARS, min_size=1, max_size=80).filter(lambda t: t.strip())
    invalid = st.one_of(
        st.text(st.sampled_from(" \t\n\u3000\u2028"), max_size=5).map(encoded),  # empty or whitespace
        st.integers(MAX_TEXT_CHARS + 1, MAX_TEXT_CHARS + 50).map(lambda n: encoded("x" * n)),
        st.tuples(valid, st.characters(whitelist_categories=("Cc",), blacklist_characters="\t\n\r"))
        .map(lambda p: encoded(p[0] + p[1])),  # a control character
        st.binary(min_size=1, max_size=20).filter(lambda b: not _is_utf8(b))
        .map(lambda b: np.array([b], dtype=np.object_)),
    )
    valid_choice = valid.map(lambda t: (tensor("text", "BYTES", encoded(t)), True))
    if only_valid:
        return valid_choice
    return st.one_of(
        valid_choice,
        invalid.map(lambda a: (tensor("text", "BYTES", a), False)),
        st.just((None, False)),  # missing
        st.just((tensor("text", "INT32", np.array([1], np.int32)), False)),
    )


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@st.composite
def requests(draw):
    """(inputs, request parameters, is_valid); half of them valid by construction."""
    only_valid = draw(st.booleans())
    # the bounds the server documents (docs/RELIABILITY.md, "Limits and errors"); valid lengths stay ≤ 1 s so
    # that the whole run takes seconds
    temperature, top_p, penalty = ranged(0.0, 10.0), ranged(1e-6, 1.0), ranged(1e-3, 10.0)
    seconds = ranged(1e-3, 1800.0)
    length = st.floats(f32_at_least(1e-3), 1.0, width=32, allow_subnormal=False)
    top_k = st.integers(0, 100_000), st.one_of(st.integers(-2**31, -1), st.integers(100_001, 2**31 - 1))
    voices = [(None, True), (tensor("voice", "BYTES", np.array([b"tiny"], np.object_)), True)]
    if not only_valid:
        voices += [(tensor("voice", "BYTES", np.array([b"nobody"], np.object_)), False),
                   (tensor("voice", "BYTES", np.array([b"\xc3"], np.object_)), False),
                   (tensor("pitch", "FP32", np.array([1.0], np.float32)), False)]  # not an input
    fields = [
        draw(text_field(only_valid)),
        draw(field("temperature", "FP32", np.float32, *temperature, only_valid)),
        draw(field("top_p", "FP32", np.float32, *top_p, only_valid)),
        draw(field("top_k", "INT32", np.int32, *top_k, only_valid)),
        draw(field("repetition_penalty", "FP32", np.float32, *penalty, only_valid)),
        draw(field("seed", "INT64", np.int64, st.integers(-2**63, 2**63 - 1), st.nothing(), only_valid)),
        draw(field("max_audio_seconds", "FP32", np.float32, length, seconds[1], only_valid)),
        draw(field("ignore_eos", "BOOL", np.bool_, st.booleans(), st.nothing(), only_valid)),
        draw(st.sampled_from(voices)),
    ]
    if fields[6][0] is None:  # no length given: keep the default 60 s out of the run
        fields.append((tensor("max_audio_seconds", "FP32", np.array([0.5], np.float32)), True))
    parameters = None if only_valid else draw(st.sampled_from([None, {"speed": 1.5}, {"language": "en"}]))
    inputs = [t for t, _ in fields if t is not None]
    return inputs, parameters, all(ok for _, ok in fields) and parameters is None


@settings(max_examples=60, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(request=requests())
def test_every_request_gets_audio_or_an_error_at_once(url, request):
    inputs, parameters, is_valid = request
    with LiveStream(url, inputs, parameters) as stream:
        outcome = stream.read(max_responses=1, timeout_s=10)  # then the client goes away (cancels)
    assert not outcome.is_timed_out, "no answer within 10 s"
    if is_valid:
        assert outcome.error is None, outcome.error
        assert outcome.chunk_indices == [0] or outcome.is_final  # audio (or an immediate end of speech)
    else:
        assert outcome.error and not outcome.chunk_indices


def test_server_is_ready_and_idle_after_the_property_run(server, url):
    ready = f"http://127.0.0.1:{server.config.ports.http}/v2/health/ready"
    assert urllib.request.urlopen(ready, timeout=5).status == 200
    # every stream the property test abandoned after its first chunk was cancelled and freed
    assert wait_for(lambda: scrape(server)["voxlane_live_requests"] == 0, timeout_s=10)
    assert wait_for(lambda: scrape(server)["voxlane_lm_batch_size"] == 0, timeout_s=10)
