"""A bug of the gateway's own (any exception a handler did not expect) is answered as OpenAI's JSON 500 and
logged with its trace, never as aiohttp's text/plain 500; a client that went away is no error to answer."""
from __future__ import annotations

import asyncio
import logging

from aiohttp.test_utils import TestClient, TestServer

from server.gateway import app as gateway_app
from server.gateway import service
from server.gateway.config import GatewayConfig


def test_an_unexpected_failure_is_a_json_500_naming_no_internals(monkeypatch, caplog):
    async def broken(request):
        raise KeyError("a secret path /srv/x")
    monkeypatch.setattr(gateway_app, "models", broken)
    gateway = service.Gateway(GatewayConfig())

    async def run():
        async with TestClient(TestServer(gateway_app.build_app(gateway))) as client:
            response = await client.get("/v1/models")
            return response.status, response.content_type, await response.json()

    with caplog.at_level(logging.ERROR, logger="voxlane.gateway"):
        status, content_type, body = asyncio.run(run())
    assert (status, content_type) == (500, "application/json")
    assert body["error"]["code"] == "internal_error" and body["error"]["type"] == "server_error"
    assert body["error"]["message"] == "the gateway failed: KeyError"  # the detail stays in the log
    assert "GET /v1/models failed" in caplog.text and "a secret path" in caplog.text
