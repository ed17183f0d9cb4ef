"""CUDA graphs of a prefill over (batch, prompt length) buckets, prompts right-padded.

A group of n prompts of lengths L_i runs in the smallest batch bucket >= n and the smallest length
bucket >= max L_i. Right padding is exact for the real tokens: attention is causal, so a real
token never sees the padding after it, and the hidden state is read at each row's own last token.
The padding leaves garbage keys at positions L_i.. of the row's cache; a decode step writes its
position before it attends to it and never reads past it, so the garbage is overwritten unread.
Padding rows of a batch bucket read and write the scratch slot only.

A prompt may start at a position P > 0 (a cached prefix's KV already in its row, models/prompt_cache.py):
its tokens sit at positions P .. P + L - 1 and attend to the prefix. A graph's rows carry their own start
(`starts`), so prompts with and without a prefix share a replay; a prompt whose start plus length bucket
passes its cache row runs eagerly, as a padded row must fit its row.
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

# (embeds [B, L, H], rows [B] int64, last [B] int64 = each row's last real index in embeds, starts [B] int64 = each
# row's first position) -> writes slot memory
PrefillFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], None]


@dataclass(frozen=True)
class PrefillGroup:
    """Prompts that run as one graph replay: their batch rows 0..n-1."""

    indices: tuple[int, ...]  # positions in the caller's list
    batch: int  # the batch bucket
    length: int  # the length bucket


def plan_groups(lengths: list[int], batch_sizes: tuple[int, ...] = PREFILL_BATCH_SIZES,
                length_buckets: tuple[int, ...] = PREFILL_LENGTHS,
                max_tokens: int = MAX_PREFILL_TOKENS, starts: list[int] | None = None,
                max_positions: int | None = None) -> tuple[list[PrefillGroup], list[int]]:
    """Greedy groups of similar lengths (shortest first) that fit a graph -> (groups, indices left to
    the eager path: prompts longer than the largest length bucket, or whose start (`starts`, 0 by default)
    plus length bucket passes `max_positions`)."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    starts = starts or [0] * len(lengths)
    fits = [_fits(length, start, length_buckets, max_positions) for length, start in zip(lengths, starts)]
    eager = [i for i in order if not fits[i]]
    groups, current = [], []
    for i in (i for i in order if fits[i]):
        length = smallest_at_least(length_buckets, lengths[i])
        widest = max(b for b in batch_sizes if b * length <= max_tokens)
        if current and (len(current) == widest or smallest_at_least(length_buckets, lengths[current[-1]]) != length):
            groups.append(_group(current, lengths, batch_sizes, length_buckets))
            current = []
        current.append(i)
    if current:
        groups.append(_group(current, lengths, batch_sizes, length_buckets))
    return groups, eager


def _fits(length: int, start: int, length_buckets: tuple[int, ...], max_positions: int | None) -> bool:
    if length > length_buckets[-1]:
        return False
    return max_positions is None or start + smallest_at_least(length_buckets, length) <= max_positions


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
        self.starts = torch.zeros(batch_sizes[-1], device=device, dtype=torch.int64)
        self._graphs: dict[tuple[int, int], torch.cuda.CUDAGraph] = {}
        self._pool = torch.cuda.graph_pool_handle()

    @property
    def buckets(self) -> list[tuple[int, int]]:
        return [(b, n) for n in self.lengths for b in self.batch_sizes if b * n <= self.max_tokens]

    def capture_all(self) -> None:
        """Largest first, so the shared pool is sized once."""
        for batch, length in sorted(self.buckets, key=lambda bl: -bl[0] * bl[1]):
            self._graph(batch, length)

    def run(self, group: PrefillGroup, embeds: list[torch.Tensor], rows: list[int],
            starts: list[int] | None = None) -> None:
        """embeds: one [L_i, H] device tensor per prompt of the group, rows: their cache rows, starts: their first
        positions (0 by default)."""
        graph = self._graph(group.batch, group.length)
        n = len(embeds)
        for i, e in enumerate(embeds):
            self.embeds[i, :e.shape[0]].copy_(e)
        pad = group.batch - n
        host = torch.tensor([rows + [self.scratch_row] * pad, [e.shape[0] - 1 for e in embeds] + [0] * pad,
                             (starts or [0] * n) + [0] * pad])
        self.rows[:group.batch].copy_(host[0], non_blocking=True)
        self.last[:group.batch].copy_(host[1], non_blocking=True)
        self.starts[:group.batch].copy_(host[2], non_blocking=True)
        graph.replay()

    def _graph(self, batch: int, length: int) -> torch.cuda.CUDAGraph:
        if (batch, length) not in self._graphs:
            self.rows[:batch].fill_(self.scratch_row)  # warm-up and capture touch the scratch row only
            self.last[:batch].fill_(length - 1)
            self.starts[:batch].fill_(0)
            step = lambda: self.prefill(self.embeds[:batch, :length], self.rows[:batch], self.last[:batch],  # noqa: E731
                                        self.starts[:batch])
            [(graph, _)] = capture_steps((step,), self._pool)
            self._graphs[(batch, length)] = graph
        return self._graphs[(batch, length)]
