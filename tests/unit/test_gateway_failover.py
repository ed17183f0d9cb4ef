"""Before its first chunk, a stream that a server refuses (503) goes to the next server; nothing else is retried."""
from __future__ import annotations

import asyncio

import numpy as np
import pytest

from server.gateway import readiness, service
from server.gateway.config import GatewayConfig
from server.gateway.errors import bad_request, from_ended, unavailable
from server.gateway.readiness import Probe
from server.gateway.server_settings import ServerSettings
from server.gateway.speech import GatewaySpeechRequest
from server.gateway.triton_stream import AudioChunk, StreamFailure
from protocol.reasons import Ended, EndReason
from tests.unit.test_gateway_listings import get_json

REQUEST = GatewaySpeechRequest("m", "Hello.", None)


def fake_streams(monkeypatch, behaviour: dict[str, object]) -> list[str]:
    """Replace the Triton stream: each server URL either fails with a StreamFailure or yields two chunks."""
    calls = []

    async def stream_chunks(stub, request, timeout_s, lease=None):
        calls.append(stub)
        outcome = behaviour[stub]
        if isinstance(outcome, StreamFailure):
            raise outcome
        for i in range(2):
            yield AudioChunk(i, np.zeros(4, np.float32), 24000, "urgent", 0.0)

    monkeypatch.setattr(service, "stream_chunks", stream_chunks)
    monkeypatch.setattr(service.Gateway, "_stub", lambda self, backend: backend.url)
    return calls


async def collect(gateway: service.Gateway) -> list[int]:
    return [chunk.index async for chunk in gateway.stream_speech(REQUEST)]


def test_an_overloaded_server_passes_the_stream_to_the_next(monkeypatch):
    gateway = service.Gateway(GatewayConfig(tritons=("a:1", "b:1")))
    calls = fake_streams(monkeypatch, {"a:1": StreamFailure(unavailable("server overloaded", "overloaded")),
                                       "b:1": "ok"})
    assert asyncio.run(collect(gateway)) == [0, 1]
    assert calls == ["a:1", "b:1"]
    assert [b.num_live for b in gateway.balancer.backends] == [0, 0]
    assert gateway.balancer.backends[0].down_until == 0.0  # refused, not unreachable: still chosen later


def test_an_unreachable_server_is_marked_down(monkeypatch):
    gateway = service.Gateway(GatewayConfig(tritons=("a:1", "b:1")))
    fake_streams(monkeypatch, {"a:1": StreamFailure(unavailable("triton UNAVAILABLE"), is_connection=True),
                               "b:1": "ok"})
    assert asyncio.run(collect(gateway)) == [0, 1]
    assert gateway.balancer.backends[0].down_until > 0


def test_when_every_server_refuses_the_client_gets_503(monkeypatch):
    gateway = service.Gateway(GatewayConfig(tritons=("a:1", "b:1")))
    refused = StreamFailure(unavailable("server overloaded", "overloaded"))
    fake_streams(monkeypatch, {"a:1": refused, "b:1": refused})
    with pytest.raises(StreamFailure) as caught:
        asyncio.run(collect(gateway))
    assert caught.value.error.status == 503 and caught.value.error.code == "overloaded"


def test_a_bad_request_is_not_retried(monkeypatch):
    gateway = service.Gateway(GatewayConfig(tritons=("a:1", "b:1")))
    calls = fake_streams(monkeypatch, {"a:1": StreamFailure(bad_request("input 'text' is empty")), "b:1": "ok"})
    with pytest.raises(StreamFailure) as caught:
        asyncio.run(collect(gateway))
    assert caught.value.error.status == 400 and calls == ["a:1"]


def test_a_server_with_a_lane_down_passes_the_stream_on_and_is_skipped_a_while(monkeypatch):
    gateway = service.Gateway(GatewayConfig(tritons=("a:1", "b:1")))
    lane_down = StreamFailure(from_ended(Ended(EndReason.LANE_DOWN, "the codec_urgent lane is down")),
                              reason=EndReason.LANE_DOWN)
    calls = fake_streams(monkeypatch, {"a:1": lane_down, "b:1": "ok"})
    assert asyncio.run(collect(gateway)) == [0, 1]
    assert asyncio.run(collect(gateway)) == [0, 1]  # the next stream goes straight to the healthy server
    assert calls == ["a:1", "b:1", "b:1"] and gateway.balancer.backends[0].down_until > 0


def test_a_refused_stream_is_retried_once_only(monkeypatch):
    """Three servers that all refuse: the stream is tried on two (one retry), never on every server."""
    gateway = service.Gateway(GatewayConfig(tritons=("a:1", "b:1", "c:1")))
    refused = StreamFailure(unavailable("server overloaded", "overloaded"))
    calls = fake_streams(monkeypatch, {"a:1": refused, "b:1": refused, "c:1": "ok"})
    with pytest.raises(StreamFailure) as caught:
        asyncio.run(collect(gateway))
    assert caught.value.error.status == 503 and calls == ["a:1", "b:1"]


def test_a_server_that_is_not_ready_gets_no_new_stream(monkeypatch):
    gateway = service.Gateway(GatewayConfig(tritons=("a:1", "b:1")))
    calls = fake_streams(monkeypatch, {"a:1": "ok", "b:1": "ok"})
    gateway.balancer.backends[0].is_ready = False
    assert asyncio.run(collect(gateway)) == [0, 1] and asyncio.run(collect(gateway)) == [0, 1]
    assert calls == ["b:1", "b:1"]
    gateway.balancer.backends[1].is_ready = False  # none ready: 503, nothing tried
    with pytest.raises(StreamFailure) as caught:
        asyncio.run(collect(gateway))
    assert caught.value.error.status == 503 and calls == ["b:1", "b:1"]


def test_readiness_is_polled_per_server(monkeypatch):
    """One poll sets each server's readiness from what it answers (readiness.probe)."""
    gateway = service.Gateway(GatewayConfig(tritons=("a:1", "b:1")))

    async def probe(url):
        return Probe(can_serve=url == "b:1")

    async def server_settings(url):
        return ServerSettings("qwen3-tts-tiny")

    monkeypatch.setattr(service, "probe", probe)
    monkeypatch.setattr(service, "server_settings", server_settings)
    asyncio.run(gateway.poll_readiness())
    assert [b.is_ready for b in gateway.balancer.backends] == [False, True]


def test_health_answers_from_the_readiness_poll_and_asks_no_server(monkeypatch):
    """`GET /health` is a probe's, every few seconds: it reports what the background poll last saw."""
    gateway = service.Gateway(GatewayConfig(tritons=("a:1", "b:1")))
    ready = {"a:1": False, "b:1": True}
    asked: list[str] = []

    async def probe(url):
        asked.append(url)
        return Probe(can_serve=ready[url])

    async def server_settings(url):
        return ServerSettings("qwen3-tts-tiny", mode="voxlane")

    monkeypatch.setattr(service, "probe", probe)
    monkeypatch.setattr(readiness, "probe", probe)
    monkeypatch.setattr(service, "server_settings", server_settings)
    monkeypatch.setattr(service.Gateway, "_sync_voices_to", lambda self, backend: None)
    asyncio.run(gateway.poll_readiness())
    asked.clear()
    status, report = get_json(gateway, "/health")
    assert asked == [] and status == 200 and report["status"] == "ok" and report["mode"] == "voxlane"
    assert [(s["url"], s["ready"], s["member"], s["model"]) for s in report["servers"]] == [
        ("a:1", False, True, None), ("b:1", True, True, "qwen3-tts-tiny")]  # a server not ready is not asked its model
    assert set(report["servers"][0]) == {"url", "ready", "member", "model", "live_streams", "reported_live",
                                         "external_live", "streams_started"}
    ready["b:1"] = False
    asyncio.run(gateway.poll_readiness())
    asked.clear()
    status, report = get_json(gateway, "/health")
    assert asked == [] and status == 503 and report["status"] == "unavailable"
    assert [s["ready"] for s in report["servers"]] == [False, False]


def test_a_stream_on_a_server_whose_router_died_ends_with_a_503_and_the_next_poll_watches_a_new_router(monkeypatch):
    gateway = service.Gateway(GatewayConfig(tritons=("a:1",)))
    monkeypatch.setattr(gateway, "_stub", lambda backend: backend)

    async def forever(_stub, _request):
        yield "first chunk"
        await asyncio.Event().wait()  # the dead router's responses never come

    async def run():
        got = []
        stream = gateway._failover(GatewaySpeechRequest("qwen3-tts-tiny", "Hello.", None), forever)
        got.append(await anext(stream))
        asyncio.get_running_loop().call_later(0.05, gateway._router_lost["a:1"].set)
        with pytest.raises(StreamFailure) as caught:
            await anext(stream)
        return got, caught.value.error

    got, error = asyncio.run(run())
    assert got == ["first chunk"] and (error.status, error.code) == (503, "router_restarted")
    assert gateway.balancer.backends[0].num_live == 0  # released

    answers = iter([Probe(can_serve=False, router_unloaded=True), Probe(can_serve=True)])

    async def probe(url):
        return next(answers)

    monkeypatch.setattr(service, "probe", probe)
    lost = gateway._router_lost["a:1"]
    asyncio.run(gateway.poll_readiness())  # still unloaded: the same event stays set
    assert gateway._router_lost["a:1"] is lost and lost.is_set()
    asyncio.run(gateway.poll_readiness())  # ready again: streams from now on watch a fresh event
    assert not gateway._router_lost["a:1"].is_set()
