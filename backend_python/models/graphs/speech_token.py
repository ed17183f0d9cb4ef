"""CUDA graphs of one `SpeechTokenLM` decode step (sample the step's speech tokens, feed them back), per
batch-size bucket.

One graph per bucket, all buckets in one memory pool. A batch of n rows runs in the smallest bucket >= n;
rows n.. are padding that read and write the scratch row of the slot memory, so they never touch a live
request. Inputs are static buffers filled before replay: two small host-to-device copies (the per-row
columns of `graphs/buffers.py`) and one noise draw per sampled row from its own generator. With
`graphed=False` the same function runs eagerly on the same padded buffers, the graph path's exact twin.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ..base import SamplingParams
from .buffers import FrameBuffers
from .capture import capture_steps
from ..layers.sampling import BatchSampling, draw_noise


@dataclass
class StepInputs:
    """Device inputs of one decode step; row b of every field is batch row b."""

    rows: torch.Tensor  # [B] int64, cache row (the slot; the scratch row for padding)
    positions: torch.Tensor  # [B] int64, where the step's first token is written (token j at positions + j)
    is_eos_blocked: torch.Tensor  # [B] bool, end of speech may not be sampled (too early, or ignore_eos)
    sampling: BatchSampling
    noise: torch.Tensor  # [B, frames_per_step * (num_codes + 1)] float32 Exp(1), one block per frame

    @classmethod
    def from_columns(cls, floats: torch.Tensor, ints: torch.Tensor, noise: torch.Tensor,
                     **flags: bool) -> "StepInputs":
        """floats: [B, 3] float32, ints: [B, 5] int64 (row, position, is_eos_blocked, top_k, is_greedy)."""
        return cls(rows=ints[:, 0], positions=ints[:, 1], is_eos_blocked=ints[:, 2] != 0,
                   sampling=BatchSampling.from_columns(floats, ints[:, 3:], **flags), noise=noise)


StepFn = Callable[[StepInputs], torch.Tensor]  # -> tokens [B, frames_per_step] int64 (num_codes: end of speech)


class StepGraphs(FrameBuffers):
    """Static step buffers sized to the largest bucket, and one graph per bucket."""

    def __init__(self, step: StepFn, buckets: tuple[int, ...], scratch_row: int, noise_width: int,
                 frames_per_step: int, device: torch.device) -> None:
        super().__init__(buckets, scratch_row, noise_width, frames_per_step, device)
        self.step = step

    def run(self, floats: torch.Tensor, ints: torch.Tensor, params: list[SamplingParams],
            generators: list[torch.Generator], graphed: bool) -> torch.Tensor:
        """floats [n, 3], ints [n, 5] host columns -> tokens [n, frames_per_step] int64."""
        n = floats.shape[0]
        bucket = self.bucket_for(n)
        if graphed:
            self._graph(bucket)  # a lazy capture resets the buffers: before the fill, not after
        self.fill_columns(floats, ints, bucket)
        draw_noise(self.noise, params, generators)
        self._graph(bucket).replay() if graphed else self._run(bucket)
        return self.codes[:n].clone()  # the static buffer is overwritten by the next step

    def _run(self, bucket: int) -> None:
        inputs = StepInputs.from_columns(self.floats[:bucket], self.ints[:bucket], self.noise[:bucket])
        self.codes[:bucket].copy_(self.step(inputs))

    def _capture_steps(self, bucket: int) -> torch.cuda.CUDAGraph:
        [(graph, _)] = capture_steps([lambda: self._run(bucket)], self._pool)
        return graph
