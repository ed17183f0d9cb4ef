"""Bad input gets a clear error naming the problem, fast, and the server keeps serving."""
from __future__ import annotations

import queue
import time
import urllib.error

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from clients.live_stream import LiveStream, tensor
from clients.stream import StreamError, build_inputs, synthesize
from tests.e2e.test_http import generate_stream

GOOD = "A good request right after."

BAD_REQUESTS = [
    pytest.param(dict(text=""), "empty", id="empty"),
    pytest.param(dict(text="   \n\t "), "empty", id="whitespace"),
    pytest.param(dict(text="a" * 20_001), "limit is 20000", id="too-long"),
    pytest.param(dict(text=b"caf\xc3\x28"), "not valid UTF-8", id="invalid-utf8"),
    pytest.param(dict(text="bell\x07"), "control character", id="control-char"),
    pytest.param(dict(text="Hi.", temperature=-1.0), "temperature", id="negative-temperature"),
    pytest.param(dict(text="Hi.", temperature=float("nan")), "temperature", id="nan-temperature"),
    pytest.param(dict(text="Hi.", top_p=0.0), "top_p", id="zero-top-p"),
    pytest.param(dict(text="Hi.", top_p=1.5), "top_p", id="top-p-over-1"),
    pytest.param(dict(text="Hi.", top_k=-3), "top_k", id="negative-top-k"),
    pytest.param(dict(text="Hi.", repetition_penalty=0.0), "repetition_penalty", id="zero-penalty"),
    pytest.param(dict(text="Hi.", max_audio_seconds=0.0), "max_audio_seconds", id="zero-length"),
    pytest.param(dict(text="Hi.", max_audio_seconds=1e6), "max_audio_seconds", id="too-much-audio"),
    pytest.param(dict(text="Hi.", max_audio_seconds=-2.0), "max_audio_seconds", id="negative-length"),
    pytest.param(dict(text="Hi.", top_p=float("inf")), "top_p", id="inf-top-p"),
    pytest.param(dict(text="Hi.", top_k=10**9), "top_k", id="huge-top-k"),
    pytest.param(dict(text="Hi.", repetition_penalty=float("-inf")), "repetition_penalty", id="inf-penalty"),
    pytest.param(dict(text="Hi.", voice="nobody"), "nobody", id="unknown-voice"),
    pytest.param(dict(text="\u200b\ufeff"), "empty", id="only-invisible-characters"),
    pytest.param(dict(text=" \u2060\u200b "), "empty", id="invisible-and-spaces"),
]


@pytest.mark.parametrize("request_kwargs, message", BAD_REQUESTS)
def test_bad_input_is_rejected_and_server_stays_up(url, request_kwargs, message):
    started = time.perf_counter()
    with pytest.raises(StreamError, match=message):
        synthesize(url, **request_kwargs)
    assert time.perf_counter() - started < 1.0
    assert synthesize(url, GOOD, seed=2, max_audio_seconds=0.4, ignore_eos=True).chunks


def test_missing_text_is_rejected(url):
    client = grpcclient.InferenceServerClient(url=url)
    seed = grpcclient.InferInput("seed", [1], "INT64")
    seed.set_data_from_numpy(np.array([1], dtype=np.int64))
    errors = []
    client.start_stream(callback=lambda result, error: errors.append(error))
    client.async_stream_infer("vox_ensemble", [seed])
    deadline = time.monotonic() + 5
    while not errors and time.monotonic() < deadline:
        time.sleep(0.01)
    client.stop_stream()
    assert errors and isinstance(errors[0], InferenceServerException)
    assert "text" in errors[0].message()


def test_bad_request_does_not_disturb_a_running_stream(url):
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(2) as pool:
        good = pool.submit(synthesize, url, GOOD, seed=9, max_audio_seconds=2.4, ignore_eos=True)
        time.sleep(0.1)
        with pytest.raises(StreamError):
            synthesize(url, "Hi.", voice="nobody")
        result = good.result()
    assert [c.index for c in result.chunks] == list(range(len(result.chunks)))
    assert result.audio.size == 30 * 1920


def first_answer(url: str, inputs: list, parameters: dict | None = None):
    with LiveStream(url, inputs, parameters) as stream:
        return stream.read(max_responses=1, timeout_s=5)


def text_input():
    return tensor("text", "BYTES", np.array([b"Hi."], dtype=np.object_))


MALFORMED = [  # what Triton itself refuses against the model config, before the router runs
    pytest.param(lambda: [text_input(), tensor("tempo", "FP32", np.array([1.5], np.float32))],
                 "unexpected inference input 'tempo'", id="unknown-input"),
    pytest.param(lambda: [text_input(), tensor("temperature", "FP64", np.array([0.5]))],
                 "data-type is 'FP64'", id="wrong-dtype"),
    pytest.param(lambda: [tensor("text", "INT32", np.array([7], np.int32))], "data-type is 'INT32'",
                 id="text-not-bytes"),
    pytest.param(lambda: [tensor("text", "BYTES", np.array([b"a", b"b"], dtype=np.object_))],
                 "unexpected shape for input 'text'", id="two-texts"),
    pytest.param(lambda: [text_input(), tensor("seed", "INT64", np.zeros([1, 1], np.int64))],
                 "unexpected shape for input 'seed'", id="seed-1x1"),
]


@pytest.mark.parametrize("make_inputs, message", MALFORMED)
def test_malformed_tensors_are_refused(url, make_inputs, message):
    outcome = first_answer(url, make_inputs())
    assert outcome.error is not None and message in outcome.error and not outcome.chunk_indices


def test_unknown_request_parameter_is_refused(url):
    outcome = first_answer(url, build_inputs("Hi.", max_audio_seconds=0.4, ignore_eos=True), {"speed": 2})
    assert outcome.error is not None and "unknown request parameter 'speed'" in outcome.error
    assert not outcome.chunk_indices


def test_unknown_http_field_is_refused_not_ignored(server):
    with pytest.raises(urllib.error.HTTPError) as caught:
        generate_stream(server, {"text": "Hello.", "max_audio_seconds": 0.4, "sped": 2})
    assert "unknown request parameter 'sped'" in caught.value.read().decode()


def test_invalid_utf8_voice_is_refused(url):
    inputs = [text_input(), tensor("voice", "BYTES", np.array([b"\xff\xfe"], dtype=np.object_))]
    outcome = first_answer(url, inputs)
    assert outcome.error is not None and "input 'voice' is not valid UTF-8" in outcome.error


def test_an_lm_request_naming_an_unknown_chunk_channel_is_refused(url):
    """The LM sends a router's chunks through the router's channel (chunk_channel.py): a request that
    names a channel nobody listens on gets one final response carrying the error, and nothing runs."""
    client = grpcclient.InferenceServerClient(url=url)
    responses: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: responses.put((result, error)))
    try:
        client.async_stream_infer("speechlm_lm", build_inputs("Hi.", max_audio_seconds=0.4, ignore_eos=True),
                                  parameters={"voxlane_channel": "voxlane-nobody", "voxlane_channel_key": "0" * 32},
                                  enable_empty_final_response=True)
        result, error = responses.get(timeout=10)
    finally:
        client.stop_stream()
        client.close()
    assert error is None, error
    assert "cannot reach the router's chunk channel 'voxlane-nobody'" in result.as_numpy("error")[0].decode()
    assert result.as_numpy("tokens") is None
    assert result.get_response().parameters["triton_final_response"].bool_param
    assert synthesize(url, GOOD, seed=1, max_audio_seconds=0.4, ignore_eos=True).chunks


def test_seeds_that_share_their_low_32_bits_give_different_audio(url):
    def audio(seed: int) -> np.ndarray:
        return synthesize(url, GOOD, seed=seed, max_audio_seconds=0.8, ignore_eos=True).audio
    first, other, again = audio(1), audio(4294967297), audio(1)
    # The same seed gives the same tokens; the codec's float sums may differ in the last bits with the lane and
    # the batch a chunk meets (oneDNN picks its kernels by shape), so "the same audio" is to 1e-4, and a
    # different seed must differ far beyond that.
    np.testing.assert_allclose(again, first, rtol=0, atol=1e-4)
    assert other.shape != first.shape or np.abs(other - first).max() > 1e-2


def test_an_unknown_voice_is_quoted_short(url):
    with pytest.raises(StreamError) as caught:
        synthesize(url, "Hi.", voice="v" * 10_000)
    message = str(caught.value)
    assert "unknown voice 'vvv" in message and "10000 characters" in message and len(message) < 300, message[:400]


def test_the_documented_top_p_minimum_is_accepted(url):
    assert synthesize(url, GOOD, seed=2, top_p=1e-6, max_audio_seconds=0.4, ignore_eos=True).chunks
