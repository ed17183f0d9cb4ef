"""The server's serving mode and settings, read from its model configs (not guessed from flags)."""
from __future__ import annotations

import json
import urllib.request

from protocol.chunks import ChunkSizes
from protocol.models import LM, ROUTER
from protocol.server_config import read_server_parameters


async def read_server_settings(url: str) -> dict:
    """`mode` from vox_ensemble's config parameters, plus every parameter of both models."""
    params = await read_server_parameters(url)
    return {"mode": params[ROUTER].get("mode"), **params}


def chunking_of(server: dict) -> ChunkSizes:
    """The chunk sizes the server's LM cuts streams into (what `read_server_settings` read); the defaults
    when it was not read (`--protocol openai`)."""
    params = server.get(LM)
    return ChunkSizes.from_parameters(params) if params else ChunkSizes()


async def read_gateway_settings(url: str) -> dict:
    """Through the gateway (`--protocol openai`): its /health (model, mode, each server's state)."""
    with urllib.request.urlopen(f"http://{url}/health", timeout=10) as response:
        health = json.load(response)
    return {"mode": health.get("mode"), "gateway": health}
