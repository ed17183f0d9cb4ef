"""KV memory bookkeeping: which positions of the LM's KV pool each live stream owns (plain Python).

The pool (models/layers/decoder.py `KVCache`) is `num_blocks` blocks of `block_size` positions. A stream
owns one contiguous run of blocks, sized at admission to what it can write (prompt + its frame cap), so
flash attention reads its keys in place from the run's start: no block table in the kernel, and a stream
costs the memory it needs, not a full `max_seq_len` row. Runs are placed first-fit and freed runs
coalesce with their free neighbours. The engine owns one `KVBlocks`; the model only sees extents.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass


@dataclass(frozen=True)
class Extent:
    """A stream's positions in the pool: start .. start + num_positions - 1 (a whole number of blocks)."""

    start: int
    num_positions: int


class KVBlocks:
    """First-fit allocator of contiguous block runs over a pool of `num_blocks` blocks."""

    def __init__(self, num_positions: int, block_size: int = 16) -> None:
        if block_size < 1 or num_positions < block_size:
            raise ValueError(f"need block_size >= 1 and a pool of at least one block, got "
                             f"{num_positions} positions in blocks of {block_size}")
        self.block_size = block_size
        self.num_blocks = num_positions // block_size
        self._free: list[tuple[int, int]] = [(0, self.num_blocks)]  # (first block, blocks), sorted, coalesced
        self._num_used = 0

    @property
    def num_used_blocks(self) -> int:
        return self._num_used

    @property
    def num_free_blocks(self) -> int:
        return self.num_blocks - self._num_used

    @property
    def largest_free_positions(self) -> int:
        """The longest extent that fits now (free memory may be split into shorter runs)."""
        return max((n for _, n in self._free), default=0) * self.block_size

    def blocks_for(self, num_positions: int) -> int:
        return -(-num_positions // self.block_size)

    def can_allocate(self, num_positions: int) -> bool:
        return num_positions <= self.largest_free_positions

    def allocate(self, num_positions: int) -> Extent | None:
        """A run of blocks holding num_positions, or None when no free run is long enough."""
        need = self.blocks_for(max(1, num_positions))
        for i, (first, count) in enumerate(self._free):
            if count >= need:
                self._free[i:i + 1] = [(first + need, count - need)] if count > need else []
                self._num_used += need
                return Extent(first * self.block_size, need * self.block_size)
        return None

    def free(self, extent: Extent) -> None:
        """Give a run back; it merges with the free runs beside it."""
        first, count = extent.start // self.block_size, extent.num_positions // self.block_size
        i = bisect.bisect(self._free, (first, count))
        if (i > 0 and sum(self._free[i - 1]) > first) or (i < len(self._free) and self._free[i][0] < first + count):
            raise ValueError(f"{extent} overlaps free memory: freed twice?")
        self._free.insert(i, (first, count))
        self._num_used -= count
        self._coalesce(i)

    def _coalesce(self, i: int) -> None:
        """Merge run i with the free runs right after and right before it."""
        if i + 1 < len(self._free) and sum(self._free[i]) == self._free[i + 1][0]:
            self._free[i:i + 2] = [(self._free[i][0], self._free[i][1] + self._free[i + 1][1])]
        if i > 0 and sum(self._free[i - 1]) == self._free[i][0]:
            self._free[i - 1:i + 1] = [(self._free[i - 1][0], self._free[i - 1][1] + self._free[i][1])]
