"""CUDA graphs of CosyVoice 3's flow, one per (windows, tokens) bucket, sharing one memory pool.

A window's flow is the DiT run `n_timesteps` times (the guidance rides in the batch): about 12,000 small
kernels, which eagerly on an H200 take ~0.3 s to launch one by one (BENCHMARKS.md, "Flow-matching families").
A graph replays them in one launch. The flow batches windows right-padded to a common length with a mask, which
is exact (the DiT never attends to padding, the pre-lookahead conv reads zeros past a row's end), so a batch of
B windows of at most T tokens runs in the graph of the smallest bucket (b >= B, t >= T): rows B..b are padding
rows of one token, tokens T..t are padding. Shapes past the largest bucket, and every shape on the CPU, run
eagerly through the same padded buffers.

Given the vocoder (HiFT), a bucket's graph runs it too, on the padded mel with every frame past a row's length
zeroed: HiFT reads 4 mel frames ahead through zero padding and is causal after them, so a row's audio is its
own but for its last ~63 samples (the source STFT's centring). A window with lookahead keeps them out of its
chunk; a stream's last window has none, so its last ~3 ms may differ by how it was batched. Eagerly,
HiFT costs ~1,000 small launches per call and one call per distinct window length in the batch.
"""
from __future__ import annotations

import logging

import torch

from ..graphs.buffers import CODEC_BATCH_BUCKETS, smallest_at_least
from ..graphs.capture import capture_steps

log = logging.getLogger("voxlane.codec")

# window lengths of CosyVoice 3's chunk plan (4, 8, 16, 25 tokens) with up to 32 of context and 4 of lookahead:
# 8, 16, 32, 57, then 61 for every later chunk
TOKEN_BUCKETS = (8, 16, 32, 48, 64)


class FlowGraphs:
    """Static flow inputs sized to the largest bucket, and a graph per bucket whose mel aliases the pool."""

    def __init__(self, flow, condition_dim: int, num_steps: int, cfg_rate: float, device: torch.device,
                 batch_buckets: tuple[int, ...] = CODEC_BATCH_BUCKETS, token_buckets: tuple[int, ...] = TOKEN_BUCKETS,
                 graphed: bool | None = None, vocoder=None) -> None:
        self.flow, self.num_steps, self.cfg_rate, self.vocoder = flow, num_steps, cfg_rate, vocoder
        self.batch_buckets, self.token_buckets = tuple(sorted(batch_buckets)), tuple(sorted(token_buckets))
        rows, tokens = self.batch_buckets[-1], self.token_buckets[-1]
        self.tokens = torch.zeros(rows, tokens, dtype=torch.long, device=device)
        self.lengths = torch.ones(rows, dtype=torch.long, device=device)
        self.embedding = torch.zeros(rows, condition_dim, dtype=torch.float32, device=device)
        self.start_frames = torch.zeros(rows, dtype=torch.long, device=device)
        self.graphed = device.type == "cuda" if graphed is None else graphed
        # per bucket: the graph, and its outputs (mel, audio or None) in the pool
        self._graphs: dict[tuple[int, int], tuple[torch.cuda.CUDAGraph, tuple[torch.Tensor, torch.Tensor | None]]] = {}
        self._pool = torch.cuda.graph_pool_handle() if self.graphed else None

    def bucket_for(self, num_rows: int, num_tokens: int) -> tuple[int, int] | None:
        rows = smallest_at_least(self.batch_buckets, num_rows)
        tokens = smallest_at_least(self.token_buckets, num_tokens)
        return None if rows is None or tokens is None else (rows, tokens)

    @torch.inference_mode()
    def run(self, tokens: torch.Tensor, lengths: torch.Tensor, embedding: torch.Tensor,
            start_frames: torch.Tensor) -> torch.Tensor:
        """As `Flow.forward` with the codec's steps and guidance: tokens [B, T] right-padded, lengths [B],
        embedding [B, D], start_frames [B] -> mel [B, T * ratio, mel] (a fresh tensor; garbage past a row's
        length)."""
        num_rows, num_tokens = tokens.shape
        bucket = self.bucket_for(num_rows, num_tokens)
        if bucket is None:
            return self.flow(tokens, lengths, embedding, start_frames, self.num_steps, self.cfg_rate)
        mel, _ = self._run_bucket(bucket, tokens, lengths, embedding, start_frames)
        return mel[:num_rows, : num_tokens * self.flow.cfg.token_mel_ratio].clone()  # the pool is reused

    @torch.inference_mode()
    def run_audio(self, tokens: torch.Tensor, lengths: torch.Tensor, embedding: torch.Tensor,
                  start_frames: torch.Tensor) -> torch.Tensor | None:
        """The flow and the vocoder in one bucket: as `run`, -> audio [B, T * ratio * hop] float32 (a fresh
        tensor; row i valid up to lengths[i] tokens), or None without a vocoder or past the largest bucket."""
        num_rows, num_tokens = tokens.shape
        bucket = self.bucket_for(num_rows, num_tokens)
        if self.vocoder is None or bucket is None:
            return None
        _, audio = self._run_bucket(bucket, tokens, lengths, embedding, start_frames)
        samples = num_tokens * self.flow.cfg.token_mel_ratio * self.vocoder.cfg.samples_per_mel_frame
        return audio[:num_rows, :samples].clone()

    def _run_bucket(self, bucket: tuple[int, int], tokens, lengths, embedding, start_frames):
        rows, width = bucket
        self._fill(tokens, lengths, embedding, start_frames, rows, width)
        if not self.graphed:
            return self._forward(rows, width)
        graph, outputs = self._graph(bucket)
        graph.replay()
        return outputs

    def capture_all(self) -> None:
        """Every bucket, largest first, so the shared pool is sized once and the smaller graphs reuse it."""
        for rows in reversed(self.batch_buckets):
            for width in reversed(self.token_buckets):
                self._graph((rows, width))

    def _fill(self, tokens, lengths, embedding, start_frames, rows: int, width: int) -> None:
        """The batch into the static buffers; its padding rows are one token long, zero, at frame 0."""
        num_rows, num_tokens = tokens.shape
        self.tokens[:rows, :width].zero_()
        self.tokens[:num_rows, :num_tokens].copy_(tokens)
        self.lengths[:rows].fill_(1)
        self.lengths[:num_rows].copy_(lengths)
        self.embedding[:rows].zero_()
        self.embedding[:num_rows].copy_(embedding)
        self.start_frames[:rows].zero_()
        self.start_frames[:num_rows].copy_(start_frames)

    def _forward(self, rows: int, width: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The bucket's mel [rows, width * ratio, mel] and, with a vocoder, its audio [rows, samples]."""
        mel = self.flow(self.tokens[:rows, :width], self.lengths[:rows], self.embedding[:rows],
                        self.start_frames[:rows], self.num_steps, self.cfg_rate)
        if self.vocoder is None:
            return mel, None
        ratio = self.flow.cfg.token_mel_ratio
        frames = torch.arange(width * ratio, device=mel.device)
        valid = frames[None, :] < self.lengths[:rows, None] * ratio  # zeros past each row, as eager padding
        audio = self.vocoder(mel.masked_fill(~valid[..., None], 0).transpose(1, 2), self.start_frames[:rows] * ratio)
        return mel, audio

    def _graph(self, bucket: tuple[int, int]) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
        if bucket not in self._graphs:
            rows, width = bucket
            self.tokens[:rows, :width].zero_()
            self.lengths[:rows].fill_(width)
            with torch.inference_mode():
                [(graph, outputs)] = capture_steps([lambda: self._forward(rows, width)], self._pool)
            self._graphs[bucket] = (graph, outputs)
        return self._graphs[bucket]


def try_capture(graphs: FlowGraphs) -> FlowGraphs | None:
    """`graphs` with every bucket captured, or None (the flow then runs eagerly) when capture fails: a lane
    that cannot graph its flow still serves, slower, and says why."""
    try:
        graphs.capture_all()
        return graphs
    except Exception as exc:  # a capture error must not take the lane down
        log.warning("the flow's CUDA graphs could not be captured, it runs eagerly: %s", exc)
        torch.cuda.synchronize()
        return None
