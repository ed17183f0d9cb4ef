"""Overload: beyond the LM's queue, new requests are refused at once; every stream ends."""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from clients.live_stream import LiveStream
from server.serve import ServeConfig, Server
from clients.stream import StreamError, build_inputs, synthesize
from server.triton_launch import Ports
from tests.e2e.conftest import free_ports
from tests.e2e.test_cancel import wait_for
from tests.e2e.test_metrics import scrape


@pytest.fixture(scope="module")
def small_server(model_cache, tmp_path_factory):
    http, grpc, metrics = free_ports(3)
    config = ServeConfig(max_slots=1, max_queued=1, ports=Ports(http, grpc, metrics))
    server = Server(config, log_path=tmp_path_factory.mktemp("triton-small") / "tritonserver.log")
    server.start(timeout_s=240)
    yield server
    server.stop(grace_s=0)


def attempt(url: str, i: int):
    started = time.perf_counter()
    try:
        result = synthesize(url, f"Request {i}.", seed=i, max_audio_seconds=2.0, ignore_eos=True, timeout_s=60)
        return "ok", result, time.perf_counter() - started
    except StreamError as exc:
        return str(exc), None, time.perf_counter() - started


def test_requests_beyond_the_queue_are_refused_fast_and_the_rest_complete(small_server):
    with ThreadPoolExecutor(6) as pool:
        outcomes = list(pool.map(lambda i: attempt(small_server.grpc_url, i), range(6)))
    completed = [o for o in outcomes if o[0] == "ok"]
    refused = [o for o in outcomes if o[0] != "ok"]
    assert len(outcomes) == 6  # every stream ended
    assert completed and refused
    assert all("server overloaded" in message for message, _, _ in refused)
    assert all(seconds < 1.0 for _, _, seconds in refused)
    for _, result, _ in completed:
        assert [c.index for c in result.chunks] == list(range(len(result.chunks)))
        assert result.audio.size == 25 * 1920
    assert attempt(small_server.grpc_url, 99)[0] == "ok"  # and the server still serves


def test_open_loop_load_at_four_times_capacity_ends_every_stream_cleanly(small_server):
    url = small_server.grpc_url
    # one request alone, the faster of two (a loaded host can slow one): the single LM slot's capacity is 1 / service_s
    service_s = min(attempt(url, i)[2] for i in (0, 1))
    # arrivals at 4x capacity for about 6 s: with one slot and one queue place, a request finds both taken about
    # half the time (at 2x, a host slower during the measured request than during the load could see no refusal)
    period = service_s / 4
    with ThreadPoolExecutor(32) as pool:
        futures = []
        for i in range(max(8, round(6.0 / period))):
            futures.append(pool.submit(attempt, url, 100 + i))
            time.sleep(period)
        outcomes = [f.result() for f in futures]  # attempt's own timeout bounds each stream
    refused = [o for o in outcomes if o[0] != "ok"]
    assert all("server overloaded" in message and seconds < 1.0 for message, _, seconds in refused), refused
    assert refused and len(refused) < len(outcomes)  # beyond capacity some are refused, not all
    for message, result, _ in outcomes:
        if message == "ok":
            assert [c.index for c in result.chunks] == list(range(len(result.chunks)))
            assert result.audio.size == 25 * 1920
    assert wait_for(lambda: scrape(small_server)["voxlane_live_requests"] == 0, timeout_s=5)
    assert attempt(url, 98)[0] == "ok"


def test_a_queued_request_whose_client_cancels_leaves_the_queue_at_once(small_server):
    url = small_server.grpc_url
    with LiveStream(url, build_inputs("Holding the only slot.", seed=1, max_audio_seconds=60.0,
                                      ignore_eos=True)) as holder:
        assert holder.read(max_responses=1, timeout_s=30).chunk_indices == [0]
        queued = LiveStream(url, build_inputs("Waiting for the slot.", seed=2, max_audio_seconds=2.0,
                                              ignore_eos=True))
        assert wait_for(lambda: scrape(small_server)["voxlane_live_requests"] == 2, timeout_s=5)
        queued.cancel()  # it never reached the LM slot: it must not wait for the holder to finish
        assert wait_for(lambda: scrape(small_server)["voxlane_live_requests"] == 1, timeout_s=2)
        holder.cancel()
    assert wait_for(lambda: scrape(small_server)["voxlane_live_requests"] == 0, timeout_s=3)
    assert wait_for(lambda: scrape(small_server)["voxlane_lm_batch_size"] == 0, timeout_s=3)
