"""Client acks (backpressure): which live stream an ack reaches, and what an ack request holds.

A client that sets `client_acks` on its speech request acks the chunks it has taken with control
requests on the same Triton stream: the same request id, the one input `ack_chunk` (the index of the
last chunk taken). Triton tells the router nothing else of the client's reading (scheduler/flow.py).
An ack gets no response, only the final flag, so a client that did not ask for empty final responses
sees nothing of it.
"""
from __future__ import annotations

import threading
from typing import Callable

import numpy as np

from backend_python.stub_common.request_inputs import RequestError
from protocol.quoting import quoted
from protocol.tensors import CONTROL_INPUTS

ACK = "ack"  # the kind of the message an ack puts on its stream's queue (beside the channel's kinds)
ACK_INPUT = "ack_chunk"


class AckRoutes:
    """Live acking streams by the request id their client gave them (unique among live streams)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._streams: dict[str, str] = {}

    def register(self, client_id: str, stream_id: str) -> None:
        """Raises RequestError when the id is empty or another live acking stream has it."""
        if not client_id:
            raise RequestError("a request with client_acks needs a request id (its acks name it)",
                               param="client_acks")
        with self._lock:
            if client_id in self._streams:
                raise RequestError(f"request id {quoted(client_id)} is already a live stream's; an acking "
                                   f"request's id must be unique among live streams", param="client_acks")
            self._streams[client_id] = stream_id

    def unregister(self, client_id: str) -> None:
        with self._lock:
            self._streams.pop(client_id, None)

    def stream_of(self, client_id: str) -> str | None:
        with self._lock:
            return self._streams.get(client_id)


def parse_ack(get: Callable[[str], "np.ndarray | None"], has_other_inputs: bool) -> int | None:
    """The acked chunk index of an ack request, or None when the request is not an ack."""
    array = get(ACK_INPUT)
    if array is None:
        return None
    if has_other_inputs:
        raise RequestError(f"an ack carries only {ACK_INPUT!r} (and the acked stream's request id)",
                           param=ACK_INPUT)
    if array.size != 1:
        raise RequestError(f"input {ACK_INPUT!r} must hold exactly one value, got shape {list(array.shape)}",
                           param=ACK_INPUT)
    index = int(array.reshape(-1)[0])
    if index < CONTROL_INPUTS[ACK_INPUT].low:
        raise RequestError(f"input {ACK_INPUT!r} must be a chunk index >= 0, got {index}", param=ACK_INPUT)
    return index
