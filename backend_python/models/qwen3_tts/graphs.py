"""CUDA graphs for one decode frame, per batch-size bucket.

Per bucket two graphs share one memory pool: the *predictor* graph (codebook-0 sampling with
repetition penalty and EOS blocking, then the whole 15-step code-predictor loop with sampling) and
the *talker* graph (one talker token per row, writing the next logits and hidden state). A batch
of n rows runs in the smallest bucket >= n; rows n.. are padding that read and write the scratch
slot of `SlotMemory`, so they never touch a live request. Inputs are static buffers filled before
replay: two small host-to-device copies (per-row columns), one noise draw per sampled row from its
own generator (`sampling.draw_noise`), and one stack of the rows' text embeddings. The only
device-to-host copy is the caller's (`codes.cpu()` in the engine). With `graphed=False` the same
functions run eagerly on the same padded buffers, which gives the graph path's exact twin.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ..base import SamplingParams
from .sampling import BatchSampling, draw_noise

WARMUP_RUNS = 2  # eager runs on a side stream before capture (cuBLAS/flash workspaces, lazy init)
NUM_FLOAT_COLUMNS = 3  # temperature, top_p, repetition_penalty (see sampling.host_columns)
NUM_INT_COLUMNS = 5  # row, position, is_eos_blocked, top_k, is_greedy


def batch_buckets(sizes: tuple[int, ...], num_slots: int) -> tuple[int, ...]:
    """The explicit bucket list capped by num_slots; num_slots itself is always the last bucket."""
    if any(size < 1 for size in sizes):
        raise ValueError(f"graph batch sizes must be >= 1, got {sizes}")
    return tuple(sorted({size for size in sizes if size < num_slots} | {num_slots}))


@dataclass
class FrameInputs:
    """Device inputs of one decode frame; row b of every field is batch row b."""

    rows: torch.Tensor  # [B] int64, cache row (the slot; the scratch row for padding)
    positions: torch.Tensor  # [B] int64, the talker position this frame's token is written to
    is_eos_blocked: torch.Tensor  # [B] bool, EOS may not be sampled (too early, or ignore_eos)
    sampling: BatchSampling
    noise: torch.Tensor  # [B, talker_vocab + (G-1) * codebook_size] float32 Exp(1): codebook 0, then each step
    text_embed: torch.Tensor  # [B, hidden], trailing text embedding added to the next talker input

    @classmethod
    def from_columns(cls, floats: torch.Tensor, ints: torch.Tensor, noise: torch.Tensor, text_embed: torch.Tensor,
                     **flags: bool) -> "FrameInputs":
        """floats: [B, 3] float32, ints: [B, 5] int64 (row, position, is_eos_blocked, top_k, is_greedy)."""
        return cls(rows=ints[:, 0], positions=ints[:, 1], is_eos_blocked=ints[:, 2] != 0,
                   sampling=BatchSampling.from_columns(floats, ints[:, 3:], **flags), noise=noise,
                   text_embed=text_embed)


PredictFn = Callable[[FrameInputs], tuple[torch.Tensor, torch.Tensor]]  # -> codes [B, G], frame_embed [B, H]
TalkFn = Callable[[FrameInputs, torch.Tensor], None]  # (inputs, frame_embed [B, H]) -> writes slot memory


class FrameGraphs:
    """Static frame buffers sized to the largest bucket, and the two graphs of each bucket."""

    def __init__(self, predict: PredictFn, talk: TalkFn, buckets: tuple[int, ...], scratch_row: int,
                 noise_width: int, hidden_size: int, num_codebooks: int, device: torch.device,
                 dtype: torch.dtype) -> None:
        self.predict, self.talk, self.buckets = predict, talk, buckets
        size = buckets[-1]
        self._pad_floats = torch.ones(1, NUM_FLOAT_COLUMNS)  # greedy, no penalty
        self._pad_ints = torch.tensor([[scratch_row, 0, 1, 0, 1]])  # scratch row, position 0, greedy
        self.floats = self._pad_floats.repeat(size, 1).to(device)
        self.ints = self._pad_ints.repeat(size, 1).to(device)
        self.noise = torch.ones(size, noise_width, device=device)
        self.text_embed = torch.zeros(size, hidden_size, device=device, dtype=dtype)
        self.codes = torch.zeros(size, num_codebooks, device=device, dtype=torch.int64)
        self.frame_embed = torch.zeros(size, hidden_size, device=device, dtype=dtype)
        self._graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.cuda.CUDAGraph]] = {}
        self._pool = None

    def bucket_for(self, num_rows: int) -> int:
        for bucket in self.buckets:
            if bucket >= num_rows:
                return bucket
        raise ValueError(f"batch of {num_rows} rows exceeds the largest bucket {self.buckets[-1]}")

    # ---- one frame -------------------------------------------------------------------------------
    def run(self, floats: torch.Tensor, ints: torch.Tensor, text_embeds: list[torch.Tensor],
            params: list[SamplingParams], generators: list[torch.Generator], graphed: bool) -> torch.Tensor:
        """floats [n, 3], ints [n, 5] host columns; text_embeds: n device tensors [H] -> codes [n, G] int64."""
        n = len(text_embeds)
        bucket = self.bucket_for(n)
        if graphed:
            self._graph(bucket)  # a lazy capture resets the buffers: before the fill, not after
        self.fill(floats, ints, text_embeds, params, generators, bucket)
        self.run_predictor(bucket, graphed)
        self.run_talker(bucket, graphed)
        return self.codes[:n].clone()  # the static buffer is overwritten by the next frame

    def fill(self, floats: torch.Tensor, ints: torch.Tensor, text_embeds: list[torch.Tensor],
             params: list[SamplingParams], generators: list[torch.Generator], bucket: int) -> None:
        """Write one frame's inputs into the static buffers, padding rows n..bucket-1."""
        n = len(text_embeds)
        self.floats[:bucket].copy_(torch.cat((floats, self._pad_floats.expand(bucket - n, -1))), non_blocking=True)
        self.ints[:bucket].copy_(torch.cat((ints, self._pad_ints.expand(bucket - n, -1))), non_blocking=True)
        draw_noise(self.noise, params, generators)
        torch.stack(text_embeds, out=self.text_embed[:n])

    def run_predictor(self, bucket: int, graphed: bool) -> None:
        self._graph(bucket)[0].replay() if graphed else self._predict(bucket)

    def run_talker(self, bucket: int, graphed: bool) -> None:
        self._graph(bucket)[1].replay() if graphed else self._talk(bucket)

    def _inputs(self, bucket: int) -> FrameInputs:
        return FrameInputs.from_columns(self.floats[:bucket], self.ints[:bucket], self.noise[:bucket],
                                        self.text_embed[:bucket])

    def _predict(self, bucket: int) -> None:
        codes, frame_embed = self.predict(self._inputs(bucket))
        self.codes[:bucket].copy_(codes)
        self.frame_embed[:bucket].copy_(frame_embed)

    def _talk(self, bucket: int) -> None:
        self.talk(self._inputs(bucket), self.frame_embed[:bucket])

    # ---- capture ---------------------------------------------------------------------------------
    def capture_all(self) -> None:
        """Largest bucket first, so the shared pool is sized once and the smaller graphs reuse it."""
        for bucket in reversed(self.buckets):
            self._graph(bucket)

    def _graph(self, bucket: int) -> tuple[torch.cuda.CUDAGraph, torch.cuda.CUDAGraph]:
        if bucket not in self._graphs:
            self._graphs[bucket] = self._capture(bucket)
        return self._graphs[bucket]

    def _capture(self, bucket: int) -> tuple[torch.cuda.CUDAGraph, torch.cuda.CUDAGraph]:
        """Warm-up and capture run on padding rows only, so they touch nothing but the scratch slot
        and the predictor's per-frame cache (never a live request)."""
        self.floats[:bucket].copy_(self._pad_floats.expand(bucket, -1))
        self.ints[:bucket].copy_(self._pad_ints.expand(bucket, -1))
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARMUP_RUNS):
                self._predict(bucket)
                self._talk(bucket)
        torch.cuda.current_stream().wait_stream(side)
        predictor, talker = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
        with torch.cuda.graph(predictor, pool=self._pool):
            self._predict(bucket)
        with torch.cuda.graph(talker, pool=self._pool):
            self._talk(bucket)
        return predictor, talker
