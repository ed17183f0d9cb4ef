"""`x-request-id` (server/gateway/request_ids.py) without a server: echoed when sane, else made; on every response,
error and WebSocket ones too; on the gateway's log lines for the request; and Triton's request id of its stream,
told apart from a recent stream's."""
from __future__ import annotations

import asyncio
import logging
import re

import numpy as np
import pytest
from aiohttp.test_utils import TestClient, TestServer
from multidict import CIMultiDict

from server.gateway import service
from server.gateway.app import build_app
from server.gateway.auth import Keys
from server.gateway.config import GatewayConfig
from server.gateway.request_ids import (MAX_REQUEST_ID_CHARS, REQUEST_ID_HEADER, RequestIdFilter, TritonIds,
                                         current_id, is_sane)
from server.gateway.triton_stream import AudioChunk

MODELS = ("qwen3-tts-tiny",)
FRESH = re.compile(r"[0-9a-f]{32}")  # a made id: a uuid4's hex


@pytest.mark.parametrize("value, sane", [
    ("req-7f3a", True), ("3f2c1e9a-0b1d-4c5e-8f00-123456789abc", True), ("trace:span/1+2=3_x.y", True),
    ("a" * MAX_REQUEST_ID_CHARS, True), ("a" * (MAX_REQUEST_ID_CHARS + 1), False), ("", False), (None, False),
    ("two words", False), ("quote\"d", False), ("new\nline", False), ("tab\t", False), ("ünï", False),
])
def test_a_sane_id_is_short_and_of_plain_characters(value, sane):
    assert is_sane(value) is sane


def test_a_triton_id_is_the_request_s_unless_a_live_or_recent_stream_took_it():
    now = [0.0]
    ids = TritonIds(memory_s=60.0, clock=lambda: now[0])
    assert ids.take("r1") == "r1"
    assert ids.take("r1") == "r1.2"  # while r1's stream is live (a client that sends one id on every call)
    ids.release("r1")
    now[0] = 59.0
    assert ids.take("r1") == "r1.3"  # r1 ended 59 s ago: a cancelled stream may outlive it on the server a moment
    assert ids.take("other") == "other"
    ids.release("r1.2")
    ids.release("r1.3")
    now[0] = 100.0
    assert ids.take("r1") == "r1"  # forgotten a minute after it ended
    assert ids.take("r1") == "r1.4"  # r1 live, r1.2 and r1.3 ended 41 s ago


def app_client(gateway: service.Gateway) -> TestClient:
    return TestClient(TestServer(build_app(gateway)))


def gateway_with(**config) -> service.Gateway:
    gateway = service.Gateway(GatewayConfig(**config))
    gateway.model_ids = MODELS
    return gateway


def get(gateway: service.Gateway, path: str, headers: dict | None = None) -> tuple[int, CIMultiDict]:
    async def run():
        async with app_client(gateway) as client:
            response = await client.get(path, headers=headers or {})
            return response.status, CIMultiDict(response.headers)  # header names are case-blind
    return asyncio.run(run())


@pytest.mark.parametrize("path, status", [("/v1/models", 200), ("/v1/audio/models", 200),
                                          ("/v1/nothing", 404), ("/v1/models/tts-42", 404)])
def test_every_response_echoes_a_sane_id_and_else_makes_one(path, status):
    gateway = gateway_with()
    got, headers = get(gateway, path, {REQUEST_ID_HEADER: "client-id-1"})
    assert (got, headers[REQUEST_ID_HEADER]) == (status, "client-id-1")
    got, headers = get(gateway, path)
    assert got == status and FRESH.fullmatch(headers[REQUEST_ID_HEADER])
    _, headers = get(gateway, path, {REQUEST_ID_HEADER: "not sane"})
    assert FRESH.fullmatch(headers[REQUEST_ID_HEADER])


def test_a_refused_key_and_a_wrong_method_carry_the_id_too():
    gateway = gateway_with(keys=Keys(api=frozenset({"k" * 32})))
    status, headers = get(gateway, "/v1/models", {REQUEST_ID_HEADER: "no-key"})
    assert (status, headers[REQUEST_ID_HEADER]) == (401, "no-key")

    async def run():
        async with app_client(gateway_with()) as client:
            response = await client.put("/v1/models", headers={REQUEST_ID_HEADER: "wrong-method"})
            return response.status, response.headers[REQUEST_ID_HEADER]
    assert asyncio.run(run()) == (405, "wrong-method")


def test_the_gateway_s_log_lines_for_a_request_carry_its_id(caplog):
    gateway = gateway_with()
    caplog.handler.addFilter(RequestIdFilter())  # as configure_logging puts it on the process's handler
    with caplog.at_level(logging.INFO, logger="voxlane.gateway"):
        get(gateway, "/v1/models", {REQUEST_ID_HEADER: "logged-1"})
        logging.getLogger("voxlane.gateway").info("after it")
    lines = {re.sub(r" [0-9.]+ s$", "", r.getMessage()): r.request_id for r in caplog.records
             if r.name == "voxlane.gateway"}
    assert lines == {"GET /v1/models 200": "logged-1", "after it": "-"}, caplog.text  # reset after the request


def test_the_log_format_names_the_request_id():
    record = logging.LogRecord("voxlane.gateway", logging.INFO, __file__, 1, "GET / 200", None, None)
    token = current_id.set("in-a-request")
    try:
        RequestIdFilter().filter(record)
    finally:
        current_id.reset(token)
    from server.gateway.request_ids import LOG_FORMAT
    assert "[in-a-request] GET / 200" in logging.Formatter(LOG_FORMAT).format(record)


def fake_triton(monkeypatch) -> list[str]:
    """Each speech stream's Triton request id, as the gateway hands it to the Triton stream."""
    seen = []

    async def stream_chunks(stub, request, timeout_s, lease=None):
        seen.append(request.request_id)
        yield AudioChunk(0, np.zeros(240, np.float32), 24000, "urgent", 0.0)

    monkeypatch.setattr(service, "stream_chunks", stream_chunks)
    monkeypatch.setattr(service.Gateway, "_stub", lambda self, backend: backend.url)
    return seen


def test_the_request_s_id_is_its_stream_s_triton_request_id_and_a_reused_one_is_told_apart(monkeypatch):
    seen = fake_triton(monkeypatch)
    gateway = gateway_with()
    body = {"model": MODELS[0], "input": "Hello.", "voice": "alloy", "response_format": "pcm"}

    async def run():
        async with app_client(gateway) as client:
            answers = []
            for headers in ({REQUEST_ID_HEADER: "speak-1"}, {REQUEST_ID_HEADER: "speak-1"}, {}):
                response = await client.post("/v1/audio/speech", json=body, headers=headers)
                await response.read()
                answers.append((response.status, response.headers[REQUEST_ID_HEADER]))
            return answers

    answers = asyncio.run(run())
    assert answers[:2] == [(200, "speak-1"), (200, "speak-1")]  # the client's id is echoed as it sent it
    assert seen[:2] == ["speak-1", "speak-1.2"]  # Triton's ids are unique among the gateway's recent streams
    assert seen[2] == answers[2][1] and FRESH.fullmatch(seen[2])  # a made id is Triton's too


def test_a_websocket_s_upgrade_carries_the_id_and_each_utterance_gets_a_triton_id_of_its_own(monkeypatch):
    seen = []

    async def speak_text(self, request, text):
        seen.append(request.request_id)
        text.close()
        yield AudioChunk(0, np.zeros(240, np.float32), 24000, "urgent", 0.0)

    monkeypatch.setattr(service.Gateway, "speak_text", speak_text)
    gateway = gateway_with()

    async def run():
        async with app_client(gateway) as client:
            ws = await client.ws_connect("/v1/audio/speech/stream", headers={REQUEST_ID_HEADER: "socket-1"})
            header = ws._response.headers[REQUEST_ID_HEADER]
            await ws.send_json({"type": "input_text.done"})
            async for _ in ws:
                pass
            return header

    assert asyncio.run(run()) == "socket-1" and seen == ["socket-1"]
