"""CUDA graphs of one Orpheus decode frame (7 Llama steps with their sampling), per batch-size bucket.

The frame is one graph per bucket (all buckets share one memory pool): band logits for slot k,
repetition penalty and EOS masking, sampling from pre-drawn noise, one Llama token step, seven
times. A batch of n rows runs in the smallest bucket >= n; rows n.. are padding that read and
write the scratch row of the slot memory, so they never touch a live request. Inputs are static
buffers filled before replay: two small host-to-device copies (per-row columns) and one noise
draw per sampled row from its own generator. With `graphed=False` the same function runs eagerly
on the same padded buffers, the graph path's exact twin. (Layout of the columns as in
`qwen3_tts/graphs.py`, whose bucket list this reuses.)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ..base import SamplingParams
from ..qwen3_tts.graphs import NUM_FLOAT_COLUMNS, WARMUP_RUNS, batch_buckets
from ..qwen3_tts.sampling import BatchSampling, draw_noise

__all__ = ["FrameGraphs", "FrameInputs", "batch_buckets"]


@dataclass
class FrameInputs:
    """Device inputs of one decode frame; row b of every field is batch row b."""

    rows: torch.Tensor  # [B] int64, cache row (the slot; the scratch row for padding)
    positions: torch.Tensor  # [B] int64, position of the frame's first token (slot k writes positions + k)
    is_eos_blocked: torch.Tensor  # [B] bool, END_OF_SPEECH may not be sampled (ignore_eos)
    sampling: BatchSampling
    noise: torch.Tensor  # [B, 7 * (4096 + 1)] float32 Exp(1): each slot's band, then its EOS column

    @classmethod
    def from_columns(cls, floats: torch.Tensor, ints: torch.Tensor, noise: torch.Tensor,
                     **flags: bool) -> "FrameInputs":
        """floats: [B, 3] float32, ints: [B, 5] int64 (row, position, is_eos_blocked, top_k, is_greedy)."""
        return cls(rows=ints[:, 0], positions=ints[:, 1], is_eos_blocked=ints[:, 2] != 0,
                   sampling=BatchSampling.from_columns(floats, ints[:, 3:], **flags), noise=noise)


FrameFn = Callable[[FrameInputs], torch.Tensor]  # -> codes [B, 7] int64 (4096 at slot 0: end of speech)


class FrameGraphs:
    """Static frame buffers sized to the largest bucket, and one graph per bucket."""

    def __init__(self, frame: FrameFn, buckets: tuple[int, ...], scratch_row: int, noise_width: int,
                 num_codebooks: int, device: torch.device) -> None:
        self.frame, self.buckets = frame, buckets
        size = buckets[-1]
        self._pad_floats = torch.ones(1, NUM_FLOAT_COLUMNS)  # greedy, no penalty
        self._pad_ints = torch.tensor([[scratch_row, 0, 1, 0, 1]])  # scratch row, position 0, greedy
        self.floats = self._pad_floats.repeat(size, 1).to(device)
        self.ints = self._pad_ints.repeat(size, 1).to(device)
        self.noise = torch.ones(size, noise_width, device=device)
        self.codes = torch.zeros(size, num_codebooks, device=device, dtype=torch.int64)
        self._graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self._pool = None

    def bucket_for(self, num_rows: int) -> int:
        for bucket in self.buckets:
            if bucket >= num_rows:
                return bucket
        raise ValueError(f"batch of {num_rows} rows exceeds the largest bucket {self.buckets[-1]}")

    def run(self, floats: torch.Tensor, ints: torch.Tensor, params: list[SamplingParams],
            generators: list[torch.Generator], graphed: bool) -> torch.Tensor:
        """floats [n, 3], ints [n, 5] host columns -> codes [n, 7] int64."""
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
        n = floats.shape[0]
        self.floats[:bucket].copy_(torch.cat((floats, self._pad_floats.expand(bucket - n, -1))), non_blocking=True)
        self.ints[:bucket].copy_(torch.cat((ints, self._pad_ints.expand(bucket - n, -1))), non_blocking=True)
        draw_noise(self.noise, params, generators)

    def _run(self, bucket: int) -> None:
        inputs = FrameInputs.from_columns(self.floats[:bucket], self.ints[:bucket], self.noise[:bucket])
        self.codes[:bucket].copy_(self.frame(inputs))

    def capture_all(self) -> None:
        """Largest bucket first, so the shared pool is sized once and the smaller graphs reuse it."""
        for bucket in reversed(self.buckets):
            self._graph(bucket)

    def _graph(self, bucket: int) -> torch.cuda.CUDAGraph:
        if bucket not in self._graphs:
            self._graphs[bucket] = self._capture(bucket)
        return self._graphs[bucket]

    def _capture(self, bucket: int) -> torch.cuda.CUDAGraph:
        """Warm-up and capture run on padding rows only: they touch nothing but the scratch row."""
        self.floats[:bucket].copy_(self._pad_floats.expand(bucket, -1))
        self.ints[:bucket].copy_(self._pad_ints.expand(bucket, -1))
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARMUP_RUNS):
                self._run(bucket)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            self._run(bucket)
        return graph
