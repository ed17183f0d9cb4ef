"""CUDA graphs of a codec's `decode`, one per (batch, frames) bucket, sharing one memory pool.

A codec call is a few hundred small kernels (convs, snake activations, a short transformer);
eager, a batch-1 window on an H200 is launch-bound at ~20 ms. A padded batch of B windows of at
most T frames replays the graph of the smallest bucket (b >= B, t >= T): rows B..b are all-zero
codes and frames T..t are zero codes to the right, which is exact for a causal decoder (the new
samples of a row never see frames to their right). Shapes beyond the largest bucket run eagerly.
"""
from __future__ import annotations

import torch

from backend_python.models.base import Codec
from backend_python.models.graphs.buffers import CODEC_BATCH_BUCKETS, smallest_at_least
from backend_python.models.graphs.capture import capture_steps

# window lengths of the default chunk ramp (2, 4, 8, 10 frames) behind up to 25 frames of context:
# 2, 6, 14, 24, then 35 for every later chunk
DEFAULT_FRAME_BUCKETS = (4, 8, 16, 24, 36)


class CodecGraphs:
    """Static input codes [b_max, t_max, K] and a graph per bucket whose output aliases the pool."""

    def __init__(self, codec: Codec, batch_buckets: tuple[int, ...] = CODEC_BATCH_BUCKETS,
                 frame_buckets: tuple[int, ...] = DEFAULT_FRAME_BUCKETS) -> None:
        if not codec.supports_cuda_graphs or codec.device.type != "cuda":
            raise ValueError("CUDA graphs need a CUDA codec whose decode is capturable")
        if min(batch_buckets + frame_buckets) < 1:
            raise ValueError("graph buckets must be >= 1")
        self.codec = codec
        self.batch_buckets, self.frame_buckets = tuple(sorted(batch_buckets)), tuple(sorted(frame_buckets))
        self.codes = torch.zeros(self.batch_buckets[-1], self.frame_buckets[-1], codec.num_codebooks,
                                 dtype=torch.long, device=codec.device)
        self._graphs: dict[tuple[int, int], tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self._pool = torch.cuda.graph_pool_handle()

    def bucket_for(self, num_rows: int, num_frames: int) -> tuple[int, int] | None:
        rows, frames = smallest_at_least(self.batch_buckets, num_rows), smallest_at_least(self.frame_buckets, num_frames)
        return None if rows is None or frames is None else (rows, frames)

    def decode(self, padded: torch.Tensor) -> torch.Tensor:
        """padded: [B, T, K] int64 -> audio [B, T * samples_per_frame] float32 (a fresh tensor)."""
        num_rows, num_frames = padded.shape[:2]
        bucket = self.bucket_for(num_rows, num_frames)
        if bucket is None:
            return self.codec.decode(padded)
        graph, audio = self._graph(bucket)
        rows, frames = bucket
        self.codes[:rows, :frames].zero_()
        self.codes[:num_rows, :num_frames].copy_(padded)
        graph.replay()
        return audio[:num_rows, : num_frames * self.codec.samples_per_frame].clone()  # the pool is reused

    def capture_all(self) -> None:
        """Largest shapes first, so the shared pool is sized once and the smaller graphs reuse it."""
        for rows in reversed(self.batch_buckets):
            for frames in reversed(self.frame_buckets):
                self._graph((rows, frames))

    def _graph(self, bucket: tuple[int, int]) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
        if bucket not in self._graphs:
            self._graphs[bucket] = self._capture(*bucket)
        return self._graphs[bucket]

    @torch.inference_mode()
    def _capture(self, rows: int, frames: int) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
        codes = self.codes[:rows, :frames]
        codes.zero_()
        [(graph, audio)] = capture_steps([lambda: self.codec.decode(codes)], self._pool)
        return graph, audio
