"""One `vox_ensemble` stream under the caller's control: any input tensors, read response by
response, cancel at any point. For robustness tests and the soak tool; `clients.stream`
is the plain client."""
from __future__ import annotations

import queue
import time
import uuid
from dataclasses import dataclass, field

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from clients.stream import RouterLost, close_stream, next_response
from protocol.models import ROUTER


@dataclass
class Outcome:
    """How a stream ended, as the client saw it."""

    chunk_indices: list[int] = field(default_factory=list)
    num_samples: int = 0
    error: str | None = None  # the server's error message
    is_final: bool = False  # Triton's final flag arrived
    is_timed_out: bool = False

    @property
    def is_ended(self) -> bool:
        return self.is_final or self.error is not None

    @property
    def is_in_order(self) -> bool:
        return self.chunk_indices == list(range(len(self.chunk_indices)))


def tensor(name: str, triton_type: str, array: np.ndarray) -> grpcclient.InferInput:
    result = grpcclient.InferInput(name, list(array.shape), triton_type)
    result.set_data_from_numpy(array)
    return result


class LiveStream:
    """A started stream; `read(n)` reads up to n responses, `cancel()` ends it from the client side."""

    def __init__(self, url: str, inputs: list, parameters: dict | None = None) -> None:
        self.outcome = Outcome()
        self._responses: queue.Queue = queue.Queue()
        self._client = grpcclient.InferenceServerClient(url=url)
        self._client.start_stream(callback=lambda result, error: self._responses.put((result, error)))
        self._is_closed = False
        self._is_router_lost = False
        self._client.async_stream_infer(ROUTER, inputs, request_id=uuid.uuid4().hex, parameters=parameters,
                                        enable_empty_final_response=True)

    def read(self, max_responses: int | None = None, timeout_s: float = 60.0) -> Outcome:
        """Read until the stream ends, `max_responses` were read, `timeout_s` passes, or its router is lost
        (an error, as `clients.stream.router_lost` says). Waits as `clients.stream.next_response` does, so the
        two clients notice a lost router alike."""
        deadline = time.perf_counter() + timeout_s
        num_read = 0
        while not self.outcome.is_ended and (max_responses is None or num_read < max_responses):
            try:
                result, error = next_response(self._responses, deadline, timeout_s, self._client)
            except TimeoutError:
                self.outcome.is_timed_out = True
                break
            except RouterLost as lost:
                self.outcome.error = lost.ended.message
                self._is_router_lost = True  # no final response will come: cancel, don't wait for it
                break
            self._record(result, error)
            num_read += 1
        return self.outcome

    def _record(self, result, error) -> None:
        if error is not None:
            self.outcome.error = error.message() if isinstance(error, InferenceServerException) else str(error)
            return
        audio = result.as_numpy("audio")
        if audio is not None:
            self.outcome.chunk_indices.append(int(result.as_numpy("chunk_index")[0]))
            self.outcome.num_samples += audio.size
        self.outcome.is_final = result.get_response().parameters["triton_final_response"].bool_param

    def cancel(self) -> None:
        """The client goes away: the gRPC stream is cancelled with its request."""
        self.close(cancel=True)

    def close(self, cancel: bool = True) -> None:
        """End the gRPC stream: cancelled while its request is live, else closed from our side and
        left for the server to finish (cancelling an ended stream makes Triton 2.51 keep its state:
        see `clients.stream.close_stream`)."""
        if not self._is_closed:
            self._is_closed = True
            is_ended = (self.outcome.is_ended and not self._is_router_lost) or not cancel
            close_stream(self._client, is_ended=is_ended)

    def __enter__(self) -> "LiveStream":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
