"""`SlotSpeechLM`: the slot bookkeeping every family's `SpeechLM` shares.

Host-side per-slot state lives in `_states` (plain Python, one entry per live slot); the device
tensors of all slots live in `_memory` (a family's `SlotMemory`, which has a `kv` cache and the
scratch row); on CUDA `_graphs` holds the frame runner captured over the batch-size buckets.
A family supplies `_fuse_projections`, `_allocate_memory` and `_build_graphs`.

Slots are residency, not rows of a step: a slot holds a live stream's state (its KV extent, logits,
sampler state) while a decode step runs only the `max_batch` rows the engine picks, so a paused
stream costs memory and never a row (`SlotLayout`). With a pooled KV cache (`kv_positions`) each
stream's extent is sized to what it needs and placed by the engine's block allocator (`place`).
"""
from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from typing import Any

import torch

from .base import SpeechLM

DEFAULT_GRAPH_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128)  # capped by the layout's batch, always a bucket


@dataclass(frozen=True)
class SlotLayout:
    """How `allocate_slots` lays out a model's slot memory."""

    num_slots: int  # resident streams, each with its own per-slot state and KV extent
    max_seq_len: int  # positions one stream may use, in the engine's units (prompt tokens + frames)
    max_batch: int | None = None  # rows of one decode step (its graph buckets); None: num_slots
    kv_positions: int | None = None  # a pooled KV cache of this many positions (the model's); None: static rows

    def __post_init__(self) -> None:
        if self.num_slots < 1 or self.max_seq_len < 1 or (self.max_batch or 1) < 1:
            raise ValueError(f"slots, max_seq_len and max_batch must be >= 1: {self}")
        if self.kv_positions is not None and self.kv_positions < 1:
            raise ValueError(f"kv_positions must be >= 1, got {self.kv_positions}")

    @property
    def batch(self) -> int:
        """The largest decode step: max_batch, never more than the slots."""
        return min(self.max_batch or self.num_slots, self.num_slots)


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
        # CUDA: the code predictor's attention as one Triton kernel per layer and step (families with a predictor;
        # `kernels/short_attention.py`); read when slots are allocated
        self.use_fused_predictor = True
        # CUDA: the whole decode frame on fused Triton kernels (`runs_fused_frame`: families that have them); off by
        # default until measured on a GPU (LaneSettings.fused_frame)
        self.use_fused_frame = False
        self.use_fp8_weights = False  # the fused frame's projections in float8 (families with a fused frame)
        self._memory: Any = None  # the family's SlotMemory
        self._graphs: Any = None  # the family's FrameGraphs; CUDA only
        self._states: dict[int, Any] = {}  # slot -> the family's SlotState
        self._extent_lengths: dict[int, int] = {}  # slot -> KV positions it owns (a pooled cache's `place`)

    def allocate_slots(self, num_slots: int, max_seq_len: int, max_batch: int | None = None,
                       kv_positions: int | None = None) -> None:
        """Slot memory (+ the scratch row); on CUDA also fuse projections and capture every bucket's graphs."""
        layout = SlotLayout(num_slots, max_seq_len, max_batch, kv_positions)
        is_cuda, is_fused = self.device.type == "cuda", self.runs_fused_frame()
        self._graphs, self._memory = None, None  # free the old graphs and slots before allocating anew
        if is_cuda or is_fused:
            self._fuse_projections()
            if is_cuda and self.use_torch_compile and not is_fused:  # the fused kernels leave Inductor nothing
                self._compile()
        self._memory = self._allocate_memory(layout)
        self._states, self._extent_lengths = {}, {}
        self._graphs = self._build_graphs(layout) if is_cuda or is_fused else None

    def runs_fused_frame(self) -> bool:
        """Whether the decode frame runs on the family's fused Triton kernels here (`use_fused_frame`, a family
        that has them, and a device they run on: CUDA, or the CPU under Triton's interpreter for tests)."""
        return False

    @property
    def is_graphed(self) -> bool:
        """Whether frames replay CUDA graphs (else the frame runner's buffers run eagerly)."""
        return self.use_cuda_graphs and self.device.type == "cuda"

    def kv_positions_for(self, num_prompt_tokens: int, num_frames: int) -> int:
        """KV positions a stream of this prompt and up to num_frames frames writes (its extent's size)."""
        return num_prompt_tokens + (num_frames + 1 + self.num_delay_steps) * self.positions_per_frame

    def place(self, slot: int, start: int, num_positions: int) -> None:
        """`slot`'s stream owns KV positions start .. start + num_positions - 1 of the pool (a pooled cache)."""
        self._require_memory().kv.place(slot, start, num_positions)
        self._extent_lengths[slot] = num_positions

    def kv_bytes_per_position(self) -> int:
        """Bytes one KV position takes (keys and values of every layer): what the engine sizes its pool by.
        Before `allocate_slots`, read off a one-slot, one-position layout."""
        memory = self._memory if self._memory is not None else self._allocate_memory(SlotLayout(1, 1, 1, 1))
        return 2 * memory.kv.k[:, 0].numel() * memory.kv.k.element_size()


    @abstractmethod
    def _fuse_projections(self) -> None:
        """Fuse the layers' projections for the CUDA path."""

    def _compile(self) -> None:
        """Compile the decode frame's hot path (CUDA); a family that does not compile keeps it eager."""

    @abstractmethod
    def _allocate_memory(self, layout: SlotLayout) -> Any:
        """The family's SlotMemory: num_slots rows plus the scratch row; its KV cache pooled per the layout."""

    @abstractmethod
    def _build_graphs(self, layout: SlotLayout) -> Any:
        """The family's FrameGraphs over the slot memory (use `_capture_graphs` on it)."""

    def _capture_graphs(self, graphs):
        """Capture every bucket now unless CUDA graphs are off; -> graphs."""
        if self.is_graphed:
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
        kv = self._require_memory().kv
        if state.position + self.positions_per_frame > min(self._extent_lengths.get(slot, kv.max_seq_len),
                                                           kv.max_seq_len):
            raise ValueError(f"slot {slot} is full ({state.position} positions)")
        return state
