"""Several models behind one gateway (catalog.py): each server's model learned from it, a stream to the least loaded
ready server of its model, the union listed, registers to the servers whose model clones. No server."""
from __future__ import annotations

import asyncio

import numpy as np
import pytest

from server.gateway import service
from server.gateway.balancer import Backend, Balancer
from server.gateway.catalog import build_catalog
from server.gateway.config import GatewayConfig
from server.gateway.errors import bad_request
from server.gateway.readiness import Probe
from server.gateway.server_settings import ServerSettings
from server.gateway.speech import GatewaySpeechRequest, parse_speech
from server.gateway.triton_stream import AudioChunk, StreamFailure
from server.gateway.voices import merged_register

QWEN, COSY = "qwen3-tts-tiny", "cosyvoice3-tiny"
SYNC_VOICES_TO = service.Gateway._sync_voices_to


def test_the_catalog_lists_every_model_the_first_learned_is_the_default():
    catalog = build_catalog([QWEN, COSY, QWEN])
    assert catalog.ids == (QWEN, COSY) and catalog.default_model == QWEN
    assert catalog.model_of(COSY) == COSY and catalog.model_of("tts-1") == QWEN and catalog.model_of("x") is None


def test_the_default_model_takes_the_gateway_s_own_ids():
    catalog = build_catalog([QWEN, "Qwen/Qwen3-TTS-12Hz-1.7B-Base"], default="Qwen3-TTS-12Hz-1.7B-Base",
                            model_name="voice", aliases=("tts-pro",))
    assert catalog.default_model == "Qwen/Qwen3-TTS-12Hz-1.7B-Base"
    assert catalog.ids == ("voice", "tts-pro", "Qwen3-TTS-12Hz-1.7B-Base", "Qwen/Qwen3-TTS-12Hz-1.7B-Base", QWEN)
    assert catalog.model_of("tts-pro") == catalog.model_of("gpt-4o-mini-tts") == "Qwen/Qwen3-TTS-12Hz-1.7B-Base"
    assert build_catalog([QWEN, COSY], default="unknown").default_model == QWEN  # a default not served: the first
    assert build_catalog([]).ids == () and build_catalog([]).model_of("tts-1") is None


def test_a_stream_goes_to_the_least_loaded_ready_server_of_its_model():
    balancer = Balancer([Backend("q1", model=QWEN), Backend("q2", model=QWEN), Backend("c1", model=COSY)])
    q1, q2, c1 = balancer.backends
    assert balancer.acquire(COSY) is c1 and balancer.acquire(COSY) is c1  # never a server of the other model
    assert {balancer.acquire(QWEN).url, balancer.acquire(QWEN).url} == {"q1", "q2"}
    c1.is_ready = False
    assert balancer.acquire(COSY) is None and balancer.acquire("nobody's") is None


def learned_gateway(monkeypatch, servers: dict[str, str]) -> service.Gateway:
    """A gateway whose servers (url -> model) answered one readiness poll: each is ready and said its model."""
    gateway = service.Gateway(GatewayConfig(tritons=tuple(servers)))

    async def probe(url):
        return Probe(can_serve=True)

    async def server_settings(url):
        return ServerSettings(servers[url], mode="voxlane")

    monkeypatch.setattr(service, "probe", probe)
    monkeypatch.setattr(service, "server_settings", server_settings)
    monkeypatch.setattr(service.Gateway, "_sync_voices_to", lambda self, backend: None)
    asyncio.run(gateway.poll_readiness())
    return gateway


def test_each_server_s_model_is_learned_and_the_union_is_listed(monkeypatch):
    gateway = learned_gateway(monkeypatch, {"a:1": QWEN, "b:1": COSY})
    assert [b.model for b in gateway.balancer.backends] == [QWEN, COSY]
    assert gateway.model_ids == (QWEN, COSY)
    assert parse_speech({"model": COSY, "input": "Hi.", "voice": "alloy"}, gateway.model_ids).model == COSY
    unknown = parse_speech({"model": "orpheus-tiny", "input": "Hi."}, gateway.model_ids)
    assert (unknown.status, unknown.code) == (404, "model_not_found")


def test_start_up_asks_every_server_at_once_and_the_first_in_order_gives_the_default_model(monkeypatch):
    """Each server answers only while all three are asked together: servers asked one after another would wait out
    each other's timeout, and none would answer before the start-up deadline."""
    servers = {"a:1": QWEN, "b:1": COSY, "c:1": QWEN}
    gateway = service.Gateway(GatewayConfig(tritons=tuple(servers), startup_timeout_s=0.1))
    in_flight, all_asked = set(), asyncio.Event()

    async def server_settings(url):
        in_flight.add(url)
        if in_flight == set(servers):
            all_asked.set()
        try:
            await asyncio.wait_for(all_asked.wait(), 0.5)
        except asyncio.TimeoutError:
            return None  # a server that does not answer in time
        finally:
            in_flight.discard(url)
        return ServerSettings(servers[url], mode="voxlane")

    monkeypatch.setattr(service, "server_settings", server_settings)
    asyncio.run(gateway._discover())
    assert [b.model for b in gateway.balancer.backends] == [QWEN, COSY, QWEN]
    assert gateway.catalog.default_model == QWEN and gateway.model_ids == (QWEN, COSY)


def test_requests_reach_only_their_model_s_servers(monkeypatch):
    gateway = learned_gateway(monkeypatch, {"a:1": QWEN, "b:1": COSY, "c:1": COSY})
    calls = []

    async def stream_chunks(stub, request, timeout_s, lease=None):
        calls.append(stub)
        yield AudioChunk(0, np.zeros(4, np.float32), 24000, "urgent", 0.0)

    monkeypatch.setattr(service, "stream_chunks", stream_chunks)
    monkeypatch.setattr(service.Gateway, "_stub", lambda self, backend: backend.url)

    async def speak(model):
        return [c.index async for c in gateway.stream_speech(GatewaySpeechRequest(model, "Hi.", None))]

    for model in (COSY, COSY, "tts-1", QWEN):
        asyncio.run(speak(model))
    assert sorted(calls[:2]) == ["b:1", "c:1"] and calls[2:] == ["a:1", "a:1"]  # tts-1: the default model
    gateway.balancer.backends[0].is_ready = False
    with pytest.raises(StreamFailure) as caught:  # its model's one server is down: 503, not another model
        asyncio.run(speak(QWEN))
    assert caught.value.error.status == 503 and len(calls) == 4


def test_a_model_whose_servers_all_left_is_listed_until_they_are_forgotten(monkeypatch):
    gateway = learned_gateway(monkeypatch, {"a:1": QWEN, "b:1": COSY})
    cosy = gateway.balancer.backends[1]
    cosy.is_member = False  # left DNS: a request for its model is a 503 meanwhile, not a 404
    gateway._refresh_catalog()
    assert gateway.model_ids == (QWEN, COSY)
    with pytest.raises(StreamFailure) as caught:
        asyncio.run(anext(gateway.stream_speech(GatewaySpeechRequest(COSY, "Hi.", None))))
    assert caught.value.error.status == 503
    gateway.balancer.remove(cosy)
    asyncio.run(gateway._close(cosy))
    assert gateway.model_ids == (QWEN,)


def test_a_server_that_restarts_with_another_model_is_learned_again(monkeypatch):
    servers = {"a:1": QWEN}
    gateway = learned_gateway(monkeypatch, servers)
    gateway.balancer.backends[0].is_ready = False  # restarting
    servers["a:1"] = COSY
    asyncio.run(gateway.poll_readiness())
    assert gateway.balancer.backends[0].model == COSY and gateway.model_ids == (COSY,)


def test_registers_go_to_the_servers_whose_model_clones(monkeypatch):
    gateway = learned_gateway(monkeypatch, {"a:1": QWEN, "b:1": COSY})
    calls = []

    async def call(backend, proto):
        calls.append(backend.url)
        if backend.model == QWEN:
            return bad_request("it clones no voice", param="ref_audio", code="reference_unsupported")
        return {"name": "mine"}

    monkeypatch.setattr(gateway, "_call_voice_registry", call)
    first = asyncio.run(gateway.register_voice(object()))
    assert merged_register(first) == {"object": "voice", "name": "mine"}  # the refusal of a model that cannot clone
    asyncio.run(gateway.register_voice(object()))
    assert calls == ["a:1", "b:1", "b:1"]  # learned: the next register skips it
    gateway.balancer.backends[1].clones_voices = False
    (only,) = asyncio.run(gateway.register_voice(object()))
    assert (only.status, only.code) == (400, "reference_unsupported")


def test_a_register_that_no_server_could_clone_is_the_servers_refusal():
    refused = bad_request("it clones no voice", param="ref_audio", code="reference_unsupported")
    assert merged_register([refused, refused]) is refused
    conflict = bad_request("taken", param="name", code="voice_exists")
    assert merged_register([refused, conflict]) is conflict


def test_voices_are_copied_between_servers_of_one_model_only(monkeypatch):
    gateway = learned_gateway(monkeypatch, {"a:1": QWEN, "b:1": COSY, "c:1": QWEN})
    copies = []

    async def sync(backend, sources):
        copies.append((backend.url, [s.url for s in sources]))

    monkeypatch.setattr(gateway, "_sync_voices", sync)
    monkeypatch.setattr(service.Gateway, "_sync_voices_to", SYNC_VOICES_TO)

    async def run():
        gateway._sync_voices_to(gateway.balancer.backends[2])
        await asyncio.sleep(0)

    asyncio.run(run())
    assert copies == [("c:1", ["a:1"])]


def test_a_server_forgotten_while_the_poll_asks_it_leaves_the_others_answers_whole(monkeypatch):
    """Membership forgets a server (gone from DNS past the forget time) while a readiness poll waits on it: its
    answer is dropped, and every other server's answer still counts."""
    gateway = learned_gateway(monkeypatch, {"a:1": QWEN, "b:1": QWEN, "c:1": COSY})
    a, b, c = gateway.balancer.backends
    for backend in (a, b, c):
        backend.is_ready = False

    async def probe(url):
        if url == "a:1":  # forgotten while its probe is in flight
            gateway.balancer.remove(a)
            await gateway._close(a)
        return Probe(can_serve=True)

    monkeypatch.setattr(service, "probe", probe)
    asyncio.run(gateway.poll_readiness())
    assert b.is_ready and c.is_ready and not a.is_ready
    assert gateway.model_ids == (QWEN, COSY)
