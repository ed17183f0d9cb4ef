"""Static inputs of a decode frame's CUDA graphs, one set sized to the largest batch-size bucket.

A batch of n rows runs in the smallest bucket >= n; rows n.. are padding that read and write the
scratch row of the slot memory, so they never touch a live request. Each bucket's graphs are
captured lazily or by `capture_all`, in one memory pool. Columns as in `graphs/frame.py`.
"""
from __future__ import annotations

from typing import Any

import torch

NUM_FLOAT_COLUMNS = 3  # temperature, top_p, repetition_penalty (see sampling.host_columns)
NUM_INT_COLUMNS = 5  # row, position, is_eos_blocked, top_k, is_greedy


def batch_buckets(sizes: tuple[int, ...], num_slots: int) -> tuple[int, ...]:
    """The explicit bucket list capped by num_slots; num_slots itself is always the last bucket."""
    if any(size < 1 for size in sizes):
        raise ValueError(f"graph batch sizes must be >= 1, got {sizes}")
    return tuple(sorted({size for size in sizes if size < num_slots} | {num_slots}))


# the batch sizes a codec lane's graphs are captured for: up to the background lane's largest batch
# (`voxlane serve --codec-max-batch`, 32); a larger batch runs in pieces or eagerly (each runner says which)
CODEC_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32)


def smallest_at_least(buckets: tuple[int, ...], size: int) -> int | None:
    """The smallest of the sorted `buckets` >= size, or None past the largest."""
    return next((bucket for bucket in buckets if bucket >= size), None)


def smallest_bucket(buckets: tuple[int, ...], num_rows: int) -> int:
    """The smallest bucket >= num_rows; raises past the largest."""
    bucket = smallest_at_least(buckets, num_rows)
    if bucket is None:
        raise ValueError(f"batch of {num_rows} rows exceeds the largest bucket {buckets[-1]}")
    return bucket


class FrameBuffers:
    """Static host-column, noise (filled by the caller) and code buffers, and each bucket's graphs
    (`_capture_steps` makes them)."""

    def __init__(self, buckets: tuple[int, ...], scratch_row: int, noise_width: int, num_codebooks: int,
                 device: torch.device) -> None:
        self.buckets = buckets
        size = buckets[-1]
        self._pad_floats = torch.ones(1, NUM_FLOAT_COLUMNS)  # greedy, no penalty
        self._pad_ints = torch.tensor([[scratch_row, 0, 1, 0, 1]])  # scratch row, position 0, greedy
        self.floats = self._pad_floats.repeat(size, 1).to(device)
        self.ints = self._pad_ints.repeat(size, 1).to(device)
        self.noise = torch.ones(size, noise_width, device=device)
        self.codes = torch.zeros(size, num_codebooks, device=device, dtype=torch.int64)
        self._graphs: dict[int, Any] = {}
        self._pool = None

    def bucket_for(self, num_rows: int) -> int:
        return smallest_bucket(self.buckets, num_rows)

    def fill_columns(self, floats: torch.Tensor, ints: torch.Tensor, bucket: int) -> None:
        """Write one frame's host columns (floats [n, 3], ints [n, 5]), padding rows n..bucket-1."""
        n = floats.shape[0]
        self.floats[:bucket].copy_(torch.cat((floats, self._pad_floats.expand(bucket - n, -1))), non_blocking=True)
        self.ints[:bucket].copy_(torch.cat((ints, self._pad_ints.expand(bucket - n, -1))), non_blocking=True)

    def capture_all(self) -> None:
        """Largest bucket first, so the shared pool is sized once and the smaller graphs reuse it."""
        for bucket in reversed(self.buckets):
            self._graph(bucket)

    def _graph(self, bucket: int) -> Any:
        if bucket not in self._graphs:
            self._graphs[bucket] = self._capture(bucket)
        return self._graphs[bucket]

    def _capture(self, bucket: int) -> Any:
        """Warm-up and capture run on padding rows only: they touch nothing but the scratch row."""
        self.floats[:bucket].copy_(self._pad_floats.expand(bucket, -1))
        self.ints[:bucket].copy_(self._pad_ints.expand(bucket, -1))
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        return self._capture_steps(bucket)

    def _capture_steps(self, bucket: int) -> Any:
        """The bucket's graph(s), captured in `self._pool` (`capture.capture_steps`)."""
        raise NotImplementedError
