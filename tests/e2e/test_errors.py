"""Bad input gets a clear error naming the problem, fast, and the server keeps serving."""
from __future__ import annotations

import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from clients.stream import StreamError, synthesize

GOOD = "A good request right after."

BAD_REQUESTS = [
    pytest.param(dict(text=""), "empty", id="empty"),
    pytest.param(dict(text="   \n\t "), "empty", id="whitespace"),
    pytest.param(dict(text="a" * 2001), "limit is 2000", id="too-long"),
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
    pytest.param(dict(text="Hi.", voice="nobody"), "nobody", id="unknown-voice"),
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
