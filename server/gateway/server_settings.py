"""What a server serves, read from its model configs (what `voxlane serve` rendered them with), never guessed."""
from __future__ import annotations

from dataclasses import dataclass, field

from tritonclient.utils import InferenceServerException

from server.gateway.readiness import PROBE_TIMEOUT_S
from protocol.models import LM, ROUTER
from protocol.reference import ReferenceLimits
from protocol.server_config import read_server_parameters

UNNAMED_MODEL = "voxlane"  # a server whose configs name no model (a hand-written repository)


@dataclass(frozen=True)
class ServerSettings:
    model: str  # the served preset, checkpoint path or hub id
    mode: str | None = None  # the router's serving mode
    device: str | None = None
    reference_limits: ReferenceLimits = field(default_factory=ReferenceLimits)  # what it takes as a reference


async def server_settings(url: str) -> ServerSettings | None:
    """The model, mode and limits of the server at `url` (gRPC HOST:PORT); None if it does not answer yet."""
    try:
        params = await read_server_parameters(url, PROBE_TIMEOUT_S)
    except InferenceServerException:
        return None
    router, lm = params[ROUTER], params[LM]
    return ServerSettings(router.get("model") or lm.get("model") or UNNAMED_MODEL, router.get("mode"),
                          lm.get("device"), ReferenceLimits.from_parameters(router))
