"""The server's serving mode and settings, read from its model configs (not guessed from flags)."""
from __future__ import annotations

import json
import urllib.request

import tritonclient.grpc.aio as grpcaio

from protocol.chunks import ChunkSizes
from protocol.models import LM, ROUTER


async def read_server_settings(url: str) -> dict:
    """`mode` from vox_ensemble's config parameters, plus every parameter of both models."""
    client = grpcaio.InferenceServerClient(url=url)
    try:
        router = await client.get_model_config(ROUTER, as_json=True)
        lm = await client.get_model_config(LM, as_json=True)
    finally:
        await client.close()
    router_params = _parameters(router)
    return {"mode": router_params.get("mode"), ROUTER: router_params, LM: _parameters(lm)}


def chunking_of(server: dict) -> ChunkSizes:
    """The chunk sizes the server's LM cuts streams into (what `read_server_settings` read); the defaults
    when it was not read (`--protocol openai`)."""
    params = server.get(LM)
    return ChunkSizes.from_parameters(params) if params else ChunkSizes()


def _parameters(config: dict) -> dict[str, str]:
    params = config.get("config", config).get("parameters", {})
    return {key: value.get("string_value") for key, value in params.items()}


async def read_gateway_settings(url: str) -> dict:
    """Through the gateway (`--protocol openai`): its /health (model, mode, each server's state)."""
    with urllib.request.urlopen(f"http://{url}/health", timeout=10) as response:
        health = json.load(response)
    return {"mode": health.get("mode"), "gateway": health}
