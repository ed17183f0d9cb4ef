"""One admitted stream as the router's threads see it, and one decoded chunk ready to send."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import triton_python_backend_utils as pb_utils

from protocol.tensors import INPUT_NAMES
from scheduler import Lane


@dataclass(frozen=True)
class Job:
    """One admitted request (copies, never the request object)."""

    stream_id: str  # the LM request's id: the cancel control request names it
    inputs: list  # the client's tensors, copied
    sender: object  # the request's response sender
    arrival: float  # time.monotonic() when execute saw it
    codec_parameters: dict  # BLS parameters of its codec calls (the test-only fault tag, or empty)


@dataclass(frozen=True)
class DecodedChunk:
    """A decoded chunk, ready to send."""

    index: int
    lane: Lane
    audio: np.ndarray  # [n] float32
    sample_rate: int

    @property
    def duration_s(self) -> float:
        return self.audio.size / self.sample_rate

    def tensors(self) -> list:
        """The response tensors (protocol.tensors.RESPONSE_OUTPUTS)."""
        return [pb_utils.Tensor("audio", self.audio),
                pb_utils.Tensor("sample_rate", np.array([self.sample_rate], dtype=np.int32)),
                pb_utils.Tensor("chunk_index", np.array([self.index], dtype=np.int32)),
                pb_utils.Tensor("lane", np.array([self.lane.value.encode()], dtype=np.bytes_))]


def as_numpy(request, name: str):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy()


def copied_inputs(request) -> list:
    """The client's inputs as new tensors for the LM request (not the request's own tensors)."""
    return [pb_utils.Tensor(name, array.copy()) for name in INPUT_NAMES
            if (array := as_numpy(request, name)) is not None]
