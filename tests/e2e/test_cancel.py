"""A client that cancels mid-stream frees its LM slot; the others go on."""
from __future__ import annotations

import queue
import random
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import tritonclient.grpc as grpcclient

from clients.live_stream import LiveStream, Outcome
from clients.stream import build_inputs, synthesize
from tests import waiting
from tests.e2e.test_metrics import no_live_requests, scrape
from tests.e2e.test_streaming import TEXT


def wait_for(predicate, timeout_s: float) -> bool:
    return waiting.wait_for(predicate, timeout_s, poll_s=0.1)


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


def run_stream(url: str, index: int, cancel_after: int | None) -> Outcome:
    """A 2 s stream read to its end, or a 60 s one abandoned after `cancel_after` responses."""
    seconds = 2.0 if cancel_after is None else 60.0
    with LiveStream(url, build_inputs(f"Stream number {index}.", seed=index, max_audio_seconds=seconds,
                                      ignore_eos=True)) as stream:
        if cancel_after is None:
            return stream.read(timeout_s=120)
        outcome = stream.read(max_responses=cancel_after, timeout_s=60)
        stream.cancel()
        return outcome


def test_fifty_streams_ten_cancelled_at_random_points(server, url):
    rng = random.Random(50)
    assert no_live_requests(server), "an earlier stream lives on"
    # responses each cancelled stream reads before its client goes away; 0: before its first chunk
    cancel_after = {i: rng.randint(0, 4) for i in rng.sample(range(50), 10)}
    with ThreadPoolExecutor(50) as pool:
        outcomes = list(pool.map(lambda i: run_stream(url, i, cancel_after.get(i)), range(50)))
    for i, outcome in enumerate(outcomes):
        assert not outcome.is_timed_out and outcome.error is None, (i, outcome)
        assert outcome.is_in_order, (i, outcome.chunk_indices)
        if i not in cancel_after:
            assert outcome.is_final and outcome.num_samples == 25 * 1920, (i, outcome)
    # a cancelled 60 s stream left running would hold its slot for many seconds more
    assert wait_for(lambda: scrape(server)["voxlane_live_requests"] == 0, timeout_s=5)
    assert wait_for(lambda: scrape(server)["voxlane_lm_batch_size"] == 0, timeout_s=5)


CLIENT = """
import sys
from clients.live_stream import LiveStream
from clients.stream import build_inputs
stream = LiveStream(sys.argv[1], build_inputs("A client that dies.", seed=5, max_audio_seconds=60.0,
                                              ignore_eos=True))
outcome = stream.read(max_responses=2, timeout_s=60)
print("streaming" if outcome.chunk_indices == [0, 1] else f"failed: {outcome}", flush=True)
sys.stdin.read()  # until killed
"""


def test_a_client_killed_mid_stream_frees_its_request(server, url):
    assert no_live_requests(server), "an earlier stream lives on"
    client = subprocess.Popen([sys.executable, "-c", CLIENT, url], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, cwd=Path(__file__).resolve().parents[2])
    try:
        assert client.stdout.readline().strip() == "streaming"
        # polled: the gauge is a metric the router sets through tritonserver, not in step with the client's output
        assert wait_for(lambda: scrape(server)["voxlane_live_requests"] == 1, timeout_s=5)
    finally:
        client.kill()  # no cancel, no goodbye: the connection just drops
        client.wait()
    assert wait_for(lambda: scrape(server)["voxlane_live_requests"] == 0, timeout_s=5)
    assert wait_for(lambda: scrape(server)["voxlane_lm_batch_size"] == 0, timeout_s=5)
