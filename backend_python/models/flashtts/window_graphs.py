"""CUDA graphs of FlashTTS's codec for the windows its chunk plan makes, one per (rows, window length).

A window is the DiT in one mean-flow evaluation and HiFi-GAN: ~1,200 kernels, which eagerly on an H200 take
15.8 ms of launches for 4.5 ms of GPU time at batch 1 (BENCHMARKS.md, "Flow-matching families"). Nothing in
the codec is causal, so a window cannot be padded to a longer one; but its rows are independent, so a batch of
B windows of one length L replays the graph of (b >= B, L) with rows B..b as padding (zero codes, zero
condition, stream position 0). The lengths graphed are the chunk plan's: a first chunk of 18 tokens with 6 of
lookahead (24), and every later one with 18 tokens of context (42). Other lengths (a stream's last chunk, a
chunk plan set by flags) run eagerly.
"""
from __future__ import annotations

import logging

import torch

from ..graphs.buffers import CODEC_BATCH_BUCKETS, smallest_at_least
from ..graphs.capture import capture_steps

log = logging.getLogger("voxlane.codec")



class WindowGraphs:
    """Static inputs sized to the largest bucket and a graph per (rows, length) whose audio aliases the pool."""

    def __init__(self, codec, lengths: tuple[int, ...], batch_buckets: tuple[int, ...] = CODEC_BATCH_BUCKETS,
                 graphed: bool | None = None) -> None:
        self.codec, self.lengths = codec, tuple(sorted(set(lengths)))
        self.batch_buckets = tuple(sorted(batch_buckets))
        rows, device = self.batch_buckets[-1], codec.device
        self.codes = torch.zeros(rows, self.lengths[-1], dtype=torch.long, device=device)
        self.origins = torch.zeros(rows, dtype=torch.long, device=device)
        self.conditions = torch.zeros(rows, codec.condition_dim, dtype=torch.float32, device=device)
        self.graphed = device.type == "cuda" if graphed is None else graphed
        self._graphs: dict[tuple[int, int], tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self._pool = torch.cuda.graph_pool_handle() if self.graphed else None

    def bucket_for(self, num_rows: int, length: int) -> tuple[int, int] | None:
        rows = smallest_at_least(self.batch_buckets, num_rows)
        return None if rows is None or length not in self.lengths else (rows, length)

    @torch.inference_mode()
    def run(self, codes: torch.Tensor, origins: torch.Tensor, conditions: torch.Tensor) -> torch.Tensor | None:
        """As `FlashTTSCodec.decode_from` (codes [B, L] int64, origins [B], conditions [B, D] float32) ->
        audio [B, L * 960] float32 (a fresh tensor), or None when (B, L) has no graph."""
        num_rows, length = codes.shape
        bucket = self.bucket_for(num_rows, length)
        if bucket is None:
            return None
        rows, _ = bucket
        self.codes[:rows, :length].zero_()
        self.codes[:num_rows, :length].copy_(codes)
        self.origins[:rows].zero_()
        self.origins[:num_rows].copy_(origins)
        self.conditions[:rows].zero_()
        self.conditions[:num_rows].copy_(conditions)
        if not self.graphed:
            audio = self._forward(rows, length)
        else:
            graph, audio = self._graph(bucket)
            graph.replay()
        return audio[:num_rows].clone()  # the pool is reused

    def capture_all(self) -> None:
        """Every bucket, largest first, so the shared pool is sized once and the smaller graphs reuse it."""
        for rows in reversed(self.batch_buckets):
            for length in reversed(self.lengths):
                self._graph((rows, length))

    def _forward(self, rows: int, length: int) -> torch.Tensor:
        return self.codec.decode_from(self.codes[:rows, :length], self.origins[:rows], self.conditions[:rows])

    def _graph(self, bucket: tuple[int, int]) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
        if bucket not in self._graphs:
            rows, length = bucket
            with torch.inference_mode():
                [(graph, audio)] = capture_steps([lambda: self._forward(rows, length)], self._pool)
            self._graphs[bucket] = (graph, audio)
        return self._graphs[bucket]


def try_capture(graphs: WindowGraphs) -> WindowGraphs | None:
    """`graphs` with every bucket captured, or None (the codec then runs eagerly) when capture fails: a lane that
    cannot graph its codec still serves, slower, and says why."""
    try:
        graphs.capture_all()
        return graphs
    except Exception as exc:  # a capture error must not take the lane down
        log.warning("FlashTTS's codec graphs could not be captured, it runs eagerly: %s", exc)
        torch.cuda.synchronize()
        return None
