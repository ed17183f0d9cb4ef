"""CUDA graphs of a one-stage decode frame, per batch-size bucket: the whole frame is one function of
`FrameInputs` (Orpheus: 7 Llama steps with their sampling; Zonos: one guided backbone step and 9 codebooks;
a speech-token LM's step, CosyVoice 3 and FlashTTS: its `frames_per_step` tokens as the codes).

The frame is one graph per bucket (all buckets share one memory pool). A batch of n rows runs in the
smallest bucket >= n; rows n.. are padding that read and write the scratch row of the slot memory, so they never touch a live request. Inputs are static
buffers filled before replay: two small host-to-device copies (per-row columns) and one noise
draw per sampled row from its own generator. With `graphed=False` the same function runs eagerly
on the same padded buffers, the graph path's exact twin. (Layout of the columns as in
`graphs/frame.py`.)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ..base import SamplingParams
from .buffers import FrameBuffers
from .capture import capture_steps
from ..layers.sampling import BatchSampling, draw_noise, host_columns, host_flags


@dataclass
class FrameInputs:
    """Device inputs of one decode frame; row b of every field is batch row b."""

    rows: torch.Tensor  # [B] int64, cache row (the slot; the scratch row for padding)
    positions: torch.Tensor  # [B] int64, position of the frame's first token
    is_eos_blocked: torch.Tensor  # [B] bool, the end of speech may not be sampled (ignore_eos)
    sampling: BatchSampling
    noise: torch.Tensor  # [B, noise_width] float32 Exp(1), laid out by the family's frame

    @classmethod
    def from_columns(cls, floats: torch.Tensor, ints: torch.Tensor, noise: torch.Tensor,
                     **flags: bool) -> "FrameInputs":
        """floats: [B, 3] float32, ints: [B, 5] int64 (row, position, is_eos_blocked, top_k, is_greedy)."""
        return cls(rows=ints[:, 0], positions=ints[:, 1], is_eos_blocked=ints[:, 2] != 0,
                   sampling=BatchSampling.from_columns(floats, ints[:, 3:], **flags), noise=noise)


FrameFn = Callable[[FrameInputs], torch.Tensor]  # -> codes [B, K] int64

def frame_columns(batch, states) -> tuple[torch.Tensor, torch.Tensor]:
    """A `DecodeBatch`'s columns on the CPU: floats [B, 3], ints [B, 5], as `FrameInputs.from_columns` reads them
    (`states`: each slot's `SlotState`, for its position)."""
    floats, sampling_ints = host_columns(batch.sampling)
    frame_ints = torch.tensor([[slot, s.position, int(ignore)]
                               for slot, s, ignore in zip(batch.slots, states, batch.ignore_eos)])
    return floats, torch.cat((frame_ints, sampling_ints), dim=1)


def eager_inputs(batch, floats: torch.Tensor, ints: torch.Tensor, noise_width: int,
                 device: torch.device) -> FrameInputs:
    """The unpadded frame's inputs (the CPU's ungraphed path): only the sampling work its rows need."""
    noise = torch.ones(floats.shape[0], noise_width, device=device)
    draw_noise(noise, batch.sampling, batch.generators)
    return FrameInputs.from_columns(floats.to(device, non_blocking=True), ints.to(device, non_blocking=True), noise,
                                    **host_flags(batch.sampling))



class FrameGraphs(FrameBuffers):
    """Static frame buffers sized to the largest bucket, and one graph per bucket."""

    def __init__(self, frame: FrameFn, buckets: tuple[int, ...], scratch_row: int, noise_width: int,
                 num_codebooks: int, device: torch.device) -> None:
        super().__init__(buckets, scratch_row, noise_width, num_codebooks, device)
        self.frame = frame

    def run(self, floats: torch.Tensor, ints: torch.Tensor, params: list[SamplingParams],
            generators: list[torch.Generator], graphed: bool) -> torch.Tensor:
        """floats [n, 3], ints [n, 5] host columns -> codes [n, K] int64."""
        n = floats.shape[0]
        bucket = self.bucket_for(n)
        if graphed:
            self._graph(bucket)  # a lazy capture resets the buffers: before the fill, not after
        self.fill(floats, ints, params, generators, bucket)
        self._graph(bucket).replay() if graphed else self._run(bucket)
        return self.codes[:n].clone()  # the static buffer is overwritten by the next frame

    def fill(self, floats: torch.Tensor, ints: torch.Tensor, params: list[SamplingParams],
             generators: list[torch.Generator], bucket: int) -> None:
        """Write one frame's inputs into the static buffers, padding rows n..bucket-1."""
        self.fill_columns(floats, ints, bucket)
        draw_noise(self.noise, params, generators)

    def _run(self, bucket: int) -> None:
        inputs = FrameInputs.from_columns(self.floats[:bucket], self.ints[:bucket], self.noise[:bucket])
        self.codes[:bucket].copy_(self.frame(inputs))

    def _capture_steps(self, bucket: int) -> torch.cuda.CUDAGraph:
        [(graph, _)] = capture_steps([lambda: self._run(bucket)], self._pool)
        return graph
