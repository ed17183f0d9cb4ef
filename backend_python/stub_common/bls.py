"""The router's BLS boundary: what Triton and the LM answer to its calls, read once into `Ended` values.

Triton 2.51 answers a call to a model whose Python stub process has died with an error whose only
sign of the death is its wording ("Stub process '<model>_0_0' is not healthy."). This module is the
one place that reads Triton's error text; everything past it holds a reason.
"""
from __future__ import annotations

import triton_python_backend_utils as pb_utils

from protocol.reasons import Ended, EndReason
from protocol.wire import decode_error, is_encoded, is_triton_unavailable

_STUB_DIED = "is not healthy"  # Triton 2.51's error for a call to a model whose stub died


def stopping(model: str, error_message: str) -> Ended | None:
    """The ending of a call that Triton refused because the server is stopping (SIGTERM) or `model`
    is unloaded ("Server not ready", "Request for unknown model"), else None. LANE_DOWN, so that the
    other codec lane takes the chunk and clients retry elsewhere; it is no death: nothing is reloaded."""
    if not is_triton_unavailable(error_message):
        return None
    return Ended(EndReason.LANE_DOWN, f"the server is shutting down, or {model} is unloaded: {error_message}")


def triton_failure(error_message: str) -> EndReason:
    """The reason behind Triton's own error for a BLS call: LANE_DOWN when the model's stub died."""
    return EndReason.LANE_DOWN if _STUB_DIED in error_message else EndReason.INTERNAL


def lane_failure(model: str, error_message: str) -> Ended:
    """A lane's failed call as the router's own INTERNAL ending: the lane's words, without its wire code (a lane
    codes its errors for a direct caller; a router that sent a lane a bad request has a bug of its own)."""
    words = decode_error(error_message).message if is_encoded(error_message) else error_message
    return Ended(EndReason.INTERNAL, f"{model} failed: {words}")


def lm_refusal(response) -> Ended | None:
    """The LM's refusal in its one response to a router request (its `error` output), or None."""
    error = pb_utils.get_output_tensor_by_name(response, "error")
    return None if error is None else decode_error(error.as_numpy().reshape(-1)[0].decode("utf-8"))


def scalar_output(response, name: str) -> int:
    """An INT32 output of shape [1] or [1, 1] as an int."""
    return int(pb_utils.get_output_tensor_by_name(response, name).as_numpy().reshape(-1)[0])


def float_output(response, name: str) -> float:
    """An FP32 output of shape [1] or [1, 1] as a float."""
    return float(pb_utils.get_output_tensor_by_name(response, name).as_numpy().reshape(-1)[0])
