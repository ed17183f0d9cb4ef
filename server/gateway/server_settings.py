"""What a server serves, read from its model configs (what `voxlane serve` rendered them with), never guessed."""
from __future__ import annotations

from dataclasses import dataclass, field

import tritonclient.grpc.aio as grpcaio
from tritonclient.utils import InferenceServerException

from server.gateway.readiness import PROBE_TIMEOUT_S
from protocol.models import LM, ROUTER
from protocol.reference import ReferenceLimits

UNNAMED_MODEL = "voxlane"  # a server whose configs name no model (a hand-written repository)


@dataclass(frozen=True)
class ServerSettings:
    model: str  # the served preset, checkpoint path or hub id
    mode: str | None = None  # the router's serving mode
    device: str | None = None
    reference_limits: ReferenceLimits = field(default_factory=ReferenceLimits)  # what it takes as a reference


async def server_settings(url: str) -> ServerSettings | None:
    """The model, mode and limits of the server at `url` (gRPC HOST:PORT); None if it does not answer yet."""
    client = grpcaio.InferenceServerClient(url=url)
    try:
        router = parameters(await client.get_model_config(ROUTER, as_json=True, client_timeout=PROBE_TIMEOUT_S))
        lm = parameters(await client.get_model_config(LM, as_json=True, client_timeout=PROBE_TIMEOUT_S))
    except InferenceServerException:
        return None
    finally:
        await client.close()
    return ServerSettings(router.get("model") or lm.get("model") or UNNAMED_MODEL, router.get("mode"),
                          lm.get("device"), ReferenceLimits.from_parameters(router))


def parameters(config: dict) -> dict[str, str]:
    """A model config's parameters as strings (what the server was rendered with)."""
    params = config.get("config", config).get("parameters", {})
    return {key: value.get("string_value") for key, value in params.items() if "string_value" in value}
