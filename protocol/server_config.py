"""What a VoxLane server was rendered with (`voxlane serve`): the config parameters of its router and its LM lane,
read over gRPC. One reader for the gateway (server/gateway/server_settings.py) and the bench
(clients/bench/server_info.py)."""
from __future__ import annotations

import tritonclient.grpc.aio as grpcaio

from protocol.models import LM, ROUTER

_TRITON_VALUE = "string_value"  # a config parameter's value in Triton's JSON: {"string_value": "..."}


async def read_server_parameters(url: str, timeout_s: float | None = None) -> dict[str, dict[str, str]]:
    """The config parameters of the router and the LM lane of the server at `url` (gRPC HOST:PORT), as strings:
    {ROUTER: {...}, LM: {...}}. A server that does not answer (within `timeout_s` each, where given) raises
    tritonclient's InferenceServerException."""
    client = grpcaio.InferenceServerClient(url=url)
    try:
        return {model: parameters(await client.get_model_config(model, as_json=True, client_timeout=timeout_s))
                for model in (ROUTER, LM)}
    finally:
        await client.close()


def parameters(config: dict) -> dict[str, str]:
    """A model config's parameters as strings (its JSON as tritonclient gives it, whole or its `config`). Triton's
    JSON leaves out an empty string's `string_value`: such a parameter is read as unset."""
    params = config.get("config", config).get("parameters", {})
    return {key: value[_TRITON_VALUE] for key, value in params.items() if _TRITON_VALUE in value}
