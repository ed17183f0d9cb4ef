"""Whether a Triton server can take a new stream, asked in the background (never per request).

"Ready" here is what a stream needs: the router (`vox_ensemble`), the LM lane and at least one of the
two codec lanes. Triton's own strict readiness (`/v2/health/ready`) also says not ready for the few
seconds a dead codec lane is unloaded and loaded again by the router, while the other codec lane
serves every chunk; a gateway that trusted it would take a serving server out for those seconds. A
server that is stopping (SIGTERM) or unreachable answers not ready, or not at all: not ready.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass

import tritonclient.grpc.aio as grpcaio
from tritonclient.utils import InferenceServerException

from protocol.models import CODEC, CODEC_URGENT, LM, ROUTER

PROBE_TIMEOUT_S = 2.0  # a server that does not answer in this time is not ready
REQUIRED = (ROUTER, LM)
EITHER = (CODEC, CODEC_URGENT)  # same codec: one of them is enough


@dataclass(frozen=True)
class Probe:
    can_serve: bool  # every model a new stream needs is ready
    # the server answered that its router is not ready: unloaded, as after its process died (server/model_watch.py)
    # or at a stop. Its streams in flight are lost: their responses belonged to the router's process
    router_unloaded: bool = False


async def probe(url: str) -> Probe:
    """What the server at `url` (gRPC HOST:PORT) can do now."""
    client = grpcaio.InferenceServerClient(url=url)
    try:
        ready = await asyncio.gather(*(_is_model_ready(client, m) for m in REQUIRED + EITHER))
    finally:
        await client.close()
    required, either = ready[:len(REQUIRED)], ready[len(REQUIRED):]
    return Probe(all(required) and any(either), router_unloaded=required[0] is False)


async def can_serve(url: str) -> bool:
    """True when the server at `url` (gRPC HOST:PORT) has every model a new stream needs ready."""
    return (await probe(url)).can_serve


async def _is_model_ready(client: grpcaio.InferenceServerClient, model: str) -> bool | None:
    """The server's answer; None when there is none (unreachable, stopping, the model unknown)."""
    try:
        return bool(await client.is_model_ready(model, client_timeout=PROBE_TIMEOUT_S))
    except InferenceServerException:
        return None
