"""Overload: beyond the LM's queue, new requests are refused at once; every stream ends."""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from clients.serve import ServeConfig, Server
from clients.stream import StreamError, synthesize
from clients.triton_launch import Ports
from tests.e2e.conftest import free_ports


@pytest.fixture(scope="module")
def small_server(model_cache, tmp_path_factory):
    http, grpc, metrics = free_ports(3)
    config = ServeConfig(max_slots=1, max_queued=1, ports=Ports(http, grpc, metrics))
    server = Server(config, log_path=tmp_path_factory.mktemp("triton-small") / "tritonserver.log")
    server.start(timeout_s=240)
    yield server
    server.stop()


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
