"""One reader of what a server was rendered with (protocol/server_config.py), for the gateway and the bench alike:
a fake tritonclient, no server."""
from __future__ import annotations

import asyncio

import pytest
from tritonclient.utils import InferenceServerException

from clients.bench.server_info import chunking_of, read_server_settings
from protocol import server_config
from protocol.chunks import ChunkSizes
from protocol.models import LM, ROUTER
from protocol.reference import ReferenceLimits
from server.gateway.readiness import PROBE_TIMEOUT_S
from server.gateway.server_settings import ServerSettings, server_settings

ROUTER_CONFIG = {"config": {"parameters": {"model": {"string_value": "qwen3-tts-tiny"},
                                           "mode": {"string_value": "voxlane"},
                                           "admin_key": {}}}}  # an empty string: Triton's JSON leaves it out
LM_CONFIG = {"parameters": {"device": {"string_value": "cuda:0"}, "chunk_frames": {"string_value": "12"}}}


class Client:
    """tritonclient's aio client, faked: each model's config, or a refusal; what it was asked is kept."""

    asked: list[tuple[str, float | None]] = []
    closed: list[str] = []
    refuses = False

    def __init__(self, url: str) -> None:
        self.url = url

    async def get_model_config(self, model: str, as_json: bool, client_timeout: float | None = None) -> dict:
        assert as_json
        Client.asked.append((model, client_timeout))
        if Client.refuses:
            raise InferenceServerException("failed to connect to all addresses")
        return {ROUTER: ROUTER_CONFIG, LM: LM_CONFIG}[model]

    async def close(self) -> None:
        Client.closed.append(self.url)


@pytest.fixture
def client(monkeypatch) -> type[Client]:
    monkeypatch.setattr(server_config.grpcaio, "InferenceServerClient", Client)
    monkeypatch.setattr(Client, "asked", [])
    monkeypatch.setattr(Client, "closed", [])
    monkeypatch.setattr(Client, "refuses", False)
    return Client


def test_the_gateway_reads_its_server_settings_through_the_shared_reader_within_the_probe_timeout(client):
    settings = asyncio.run(server_settings("s:1"))
    assert settings == ServerSettings("qwen3-tts-tiny", "voxlane", "cuda:0", ReferenceLimits())
    assert client.asked == [(ROUTER, PROBE_TIMEOUT_S), (LM, PROBE_TIMEOUT_S)] and client.closed == ["s:1"]


def test_the_bench_reads_every_parameter_of_both_models_through_the_shared_reader(client):
    settings = asyncio.run(read_server_settings("s:1"))
    assert settings == {"mode": "voxlane", ROUTER: {"model": "qwen3-tts-tiny", "mode": "voxlane"},
                        LM: {"device": "cuda:0", "chunk_frames": "12"}}
    assert chunking_of(settings) == ChunkSizes(chunk_frames=12)
    assert client.asked == [(ROUTER, None), (LM, None)] and client.closed == ["s:1"]  # the bench waits


def test_a_server_that_does_not_answer_is_none_to_the_gateway_and_an_error_to_the_bench(client):
    client.refuses = True
    assert asyncio.run(server_settings("s:1")) is None
    with pytest.raises(InferenceServerException):
        asyncio.run(read_server_settings("s:2"))
    assert client.closed == ["s:1", "s:2"]
