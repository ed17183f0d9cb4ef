"""CUDA graphs of a prefill over (batch, prompt length) buckets, prompts right-padded.

A group of n prompts of lengths L_i runs in the smallest batch bucket >= n and the smallest length
bucket >= max L_i. Right padding is exact for the real tokens: attention is causal, so a real
token never sees the padding after it, and the hidden state is read at each row's own last token.
The padding leaves garbage keys at positions L_i.. of the row's cache; a decode step writes its
position before it attends to it and never reads past it, so the garbage is overwritten unread.
Padding rows of a batch bucket read and write the scratch slot only.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from .buffers import smallest_at_least
from .capture import capture_steps

PREFILL_BATCH_SIZES = (1, 2, 4, 8)
PREFILL_LENGTHS = (16, 32, 64, 128, 256, 512)
MAX_PREFILL_TOKENS = 2048  # batch x length of the largest graph: bounds the graphs' activation memory

# (embeds [B, L, H], rows [B] int64, last [B] int64 = each row's last real position) -> writes slot memory
PrefillFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], None]


@dataclass(frozen=True)
class PrefillGroup:
    """Prompts that run as one graph replay: their batch rows 0..n-1."""

    indices: tuple[int, ...]  # positions in the caller's list
    batch: int  # the batch bucket
    length: int  # the length bucket


def plan_groups(lengths: list[int], batch_sizes: tuple[int, ...] = PREFILL_BATCH_SIZES,
                length_buckets: tuple[int, ...] = PREFILL_LENGTHS,
                max_tokens: int = MAX_PREFILL_TOKENS) -> tuple[list[PrefillGroup], list[int]]:
    """Greedy groups of similar lengths (shortest first) that fit a graph -> (groups, indices left to
    the eager path: prompts longer than the largest length bucket)."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    eager = [i for i in order if lengths[i] > length_buckets[-1]]
    groups, current = [], []
    for i in (i for i in order if lengths[i] <= length_buckets[-1]):
        length = smallest_at_least(length_buckets, lengths[i])
        widest = max(b for b in batch_sizes if b * length <= max_tokens)
        if current and (len(current) == widest or smallest_at_least(length_buckets, lengths[current[-1]]) != length):
            groups.append(_group(current, lengths, batch_sizes, length_buckets))
            current = []
        current.append(i)
    if current:
        groups.append(_group(current, lengths, batch_sizes, length_buckets))
    return groups, eager


def _group(indices: list[int], lengths: list[int], batch_sizes, length_buckets) -> PrefillGroup:
    return PrefillGroup(tuple(indices), smallest_at_least(batch_sizes, len(indices)),
                        smallest_at_least(length_buckets, max(lengths[i] for i in indices)))


class PrefillGraphs:
    """Static prefill inputs sized to the largest bucket, and one graph per (batch, length) bucket."""

    def __init__(self, prefill: PrefillFn, scratch_row: int, hidden_size: int, device: torch.device,
                 dtype: torch.dtype, batch_sizes: tuple[int, ...] = PREFILL_BATCH_SIZES,
                 lengths: tuple[int, ...] = PREFILL_LENGTHS, max_tokens: int = MAX_PREFILL_TOKENS) -> None:
        self.prefill, self.scratch_row = prefill, scratch_row
        self.batch_sizes, self.lengths, self.max_tokens = batch_sizes, lengths, max_tokens
        self.embeds = torch.zeros(batch_sizes[-1], lengths[-1], hidden_size, device=device, dtype=dtype)
        self.rows = torch.full((batch_sizes[-1],), scratch_row, device=device, dtype=torch.int64)
        self.last = torch.zeros(batch_sizes[-1], device=device, dtype=torch.int64)
        self._graphs: dict[tuple[int, int], torch.cuda.CUDAGraph] = {}
        self._pool = torch.cuda.graph_pool_handle()

    @property
    def buckets(self) -> list[tuple[int, int]]:
        return [(b, n) for n in self.lengths for b in self.batch_sizes if b * n <= self.max_tokens]

    def capture_all(self) -> None:
        """Largest first, so the shared pool is sized once."""
        for batch, length in sorted(self.buckets, key=lambda bl: -bl[0] * bl[1]):
            self._graph(batch, length)

    def run(self, group: PrefillGroup, embeds: list[torch.Tensor], rows: list[int]) -> None:
        """embeds: one [L_i, H] device tensor per prompt of the group, rows: their cache rows."""
        graph = self._graph(group.batch, group.length)
        n = len(embeds)
        for i, e in enumerate(embeds):
            self.embeds[i, :e.shape[0]].copy_(e)
        pad = group.batch - n
        host = torch.tensor([rows + [self.scratch_row] * pad, [e.shape[0] - 1 for e in embeds] + [0] * pad])
        self.rows[:group.batch].copy_(host[0], non_blocking=True)
        self.last[:group.batch].copy_(host[1], non_blocking=True)
        graph.replay()

    def _graph(self, batch: int, length: int) -> torch.cuda.CUDAGraph:
        if (batch, length) not in self._graphs:
            self.rows[:batch].fill_(self.scratch_row)  # warm-up and capture touch the scratch row only
            self.last[:batch].fill_(length - 1)
            step = lambda: self.prefill(self.embeds[:batch, :length], self.rows[:batch], self.last[:batch])  # noqa: E731
            [(graph, _)] = capture_steps((step,), self._pool)
            self._graphs[(batch, length)] = graph
        return self._graphs[(batch, length)]
