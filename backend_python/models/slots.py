"""`SlotSpeechLM`: the slot bookkeeping every family's `SpeechLM` shares.

Host-side per-slot state lives in `_states` (plain Python, one entry per live slot); the device
tensors of all slots live in `_memory` (a family's `SlotMemory`, which has a `kv` cache and the
scratch row); on CUDA `_graphs` holds the frame runner captured over the batch-size buckets.
A family supplies `_fuse_projections`, `_allocate_memory` and `_build_graphs`.
"""
from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from typing import Any

import torch

from .base import SpeechLM

DEFAULT_GRAPH_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64)  # capped by num_slots, which is always a bucket


@dataclass
class SlotState:
    """Host-side bookkeeping of one live slot."""

    position: int  # next position to write


class SlotSpeechLM(SpeechLM):
    """A `SpeechLM` whose slots are rows of static device memory, plus one scratch row."""

    positions_per_frame = 1  # KV positions one decode step writes per slot

    def __init__(self) -> None:
        super().__init__()
        self.graph_batch_sizes = DEFAULT_GRAPH_BATCH_SIZES  # read by allocate_slots
        self.use_cuda_graphs = True  # False: the same padded frame, run eagerly (benchmarks, tests)
        self.use_torch_compile = True  # CUDA: fuse the decode frame's kernels with Inductor (families that can)
        self._memory: Any = None  # the family's SlotMemory
        self._graphs: Any = None  # the family's FrameGraphs; CUDA only
        self._states: dict[int, Any] = {}  # slot -> the family's SlotState

    def allocate_slots(self, num_slots: int, max_seq_len: int) -> None:
        """Slot memory (+ the scratch row); on CUDA also fuse projections and capture every bucket's graphs."""
        is_cuda = self.device.type == "cuda"
        self._graphs, self._memory = None, None  # free the old graphs and slots before allocating anew
        if is_cuda:
            self._fuse_projections()
            if self.use_torch_compile:
                self._compile()
        self._memory = self._allocate_memory(num_slots, max_seq_len)
        self._states = {}
        self._graphs = self._build_graphs(num_slots) if is_cuda else None


    @abstractmethod
    def _fuse_projections(self) -> None:
        """Fuse the layers' projections for the CUDA path."""

    def _compile(self) -> None:
        """Compile the decode frame's hot path (CUDA); a family that does not compile keeps it eager."""

    @abstractmethod
    def _allocate_memory(self, num_slots: int, max_seq_len: int) -> Any:
        """The family's SlotMemory: num_slots rows plus the scratch row."""

    @abstractmethod
    def _build_graphs(self, num_slots: int) -> Any:
        """The family's FrameGraphs over the slot memory (use `_capture_graphs` on it)."""

    def _capture_graphs(self, graphs):
        """Capture every bucket now unless CUDA graphs are off; -> graphs."""
        if self.use_cuda_graphs:
            with torch.no_grad():
                graphs.capture_all()
        return graphs

    @property
    def frame_graphs(self):
        """The CUDA frame runner (buckets, static buffers, graphs) once slots are allocated on CUDA."""
        return self._graphs

    def release(self, slot: int) -> None:
        self._states.pop(slot, None)

    def _require_memory(self):
        if self._memory is None:
            raise RuntimeError("allocate_slots must be called before prefill/decode")
        return self._memory

    def _live_state(self, slot: int):
        state = self._states.get(slot)
        if state is None:
            raise KeyError(f"slot {slot} has no prefilled request")
        if state.position + self.positions_per_frame > self._require_memory().kv.max_seq_len:
            raise ValueError(f"slot {slot} is full ({state.position} positions)")
        return state
