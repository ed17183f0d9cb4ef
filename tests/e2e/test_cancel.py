"""A client that cancels mid-stream frees its LM slot; the others go on."""
from __future__ import annotations

import queue
import time
from concurrent.futures import ThreadPoolExecutor

import tritonclient.grpc as grpcclient

from clients.stream import build_inputs, synthesize
from tests.e2e.test_metrics import scrape
from tests.e2e.test_streaming import TEXT


def wait_for(predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def start_long_stream(url: str) -> grpcclient.InferenceServerClient:
    client = grpcclient.InferenceServerClient(url=url)
    responses: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: responses.put((result, error)))
    client.async_stream_infer("vox_ensemble", build_inputs(TEXT, seed=3, max_audio_seconds=60.0, ignore_eos=True),
                              enable_empty_final_response=True)
    result, error = responses.get(timeout=30)  # the first chunk: the request is live in the LM
    assert error is None and result.as_numpy("audio") is not None
    return client


def test_cancelled_stream_frees_its_lm_slot_and_others_finish(server, url):
    with ThreadPoolExecutor(1) as pool:
        other = pool.submit(synthesize, url, TEXT, seed=4, max_audio_seconds=4.0, ignore_eos=True)
        client = start_long_stream(url)
        client.stop_stream(cancel_requests=True)  # the client goes away after its first chunk
        client.close()
        result = other.result()
    assert [c.index for c in result.chunks] == list(range(len(result.chunks)))
    assert result.audio.size == 50 * 1920
    # 60 s of audio would take the tiny LM many seconds more: the slot must free long before
    assert wait_for(lambda: scrape(server)["voxlane_live_requests"] == 0, timeout_s=5)
    assert wait_for(lambda: scrape(server)["voxlane_lm_batch_size"] == 0, timeout_s=5)
