"""Every VoxLane model's error response: the `Ended` in its wire form (protocol/wire.py), with the Triton error code
its reason calls for, so that a client calling a model directly over Triton's HTTP gets a 400 for its own bad input
(Triton maps INVALID_ARG to 400) and a 500 only for the server's failure. Over gRPC the code is the status of a
plain infer call; a stream's errors carry the wire form alone, as before."""
from __future__ import annotations

import triton_python_backend_utils as pb_utils

from protocol.reasons import Ended, EndReason
from protocol.wire import encode_error


def triton_error(ended: Ended):
    """`ended` as a Triton error: INVALID_ARG for the client's bad input, INTERNAL for the rest (retryable reasons
    too: over gRPC an UNAVAILABLE status reads as a server that cannot be reached, and the clients retry on the
    reason in the message)."""
    code = pb_utils.TritonError.INVALID_ARG if ended.reason is EndReason.REFUSED_BAD_INPUT else \
        pb_utils.TritonError.INTERNAL
    return pb_utils.TritonError(encode_error(ended), code)


def error_response(ended: Ended):
    """A Triton error response carrying `ended`."""
    return pb_utils.InferenceResponse(error=triton_error(ended))
