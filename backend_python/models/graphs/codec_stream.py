"""CUDA graphs of a codec's streaming decode, one per (batch, frames) bucket, sharing one memory pool.

Eager, a streaming call is as launch-bound as a windowed one (a few hundred small kernels), so the
stateful lane replays graphs too. Static inputs: codes [b_max, t_max, K], each row's number of new
frames [b_max], and every state tensor stacked to b_max rows. A batch of B rows of at most T new
frames replays the smallest bucket (b >= B, t >= T): rows B..b decode zero codes from a zero state
(their output is dropped), and each real row's tails are cut at its own length by a gather, so a
row's audio and state never depend on the padding. Shapes beyond the largest bucket run eagerly.
"""
from __future__ import annotations

import torch

from backend_python.models.base import Codec
from backend_python.models.codec_stream import CodecStreamState, StreamCarry, split_states
from backend_python.models.graphs.buffers import CODEC_BATCH_BUCKETS, smallest_at_least
from backend_python.models.graphs.capture import capture_steps

# new frames of the default chunk ramp (2, 4, 8, 10), and the windows a state is rebuilt from:
# a stream's first background chunk (4 frames behind 2 of context: 6) or one after a gap (35)
DEFAULT_FRAME_BUCKETS = (2, 4, 8, 10, 16, 24, 36)


class CodecStreamGraphs:
    """`decode_stream` through graphs whose outputs (audio, new state) alias the shared pool."""

    def __init__(self, codec: Codec, batch_buckets: tuple[int, ...] = CODEC_BATCH_BUCKETS,
                 frame_buckets: tuple[int, ...] = DEFAULT_FRAME_BUCKETS) -> None:
        if not (codec.supports_cuda_graphs and codec.supports_streaming_state) or codec.device.type != "cuda":
            raise ValueError("streaming CUDA graphs need a CUDA codec whose streaming decode is capturable")
        if min(batch_buckets + frame_buckets) < 1:
            raise ValueError("graph buckets must be >= 1")
        self.codec = codec
        self.batch_buckets, self.frame_buckets = tuple(sorted(batch_buckets)), tuple(sorted(frame_buckets))
        rows, frames = self.batch_buckets[-1], self.frame_buckets[-1]
        self.codes = torch.zeros(rows, frames, codec.num_codebooks, dtype=torch.long, device=codec.device)
        self.num_new = torch.ones(rows, dtype=torch.long, device=codec.device)
        fresh = codec.new_stream_state().tensors
        self.state = {k: v.expand(rows, *v.shape[1:]).clone() for k, v in fresh.items()}
        self._graphs: dict[tuple[int, int], tuple[torch.cuda.CUDAGraph, tuple]] = {}
        self._pool = torch.cuda.graph_pool_handle()

    def bucket_for(self, num_rows: int, num_frames: int) -> tuple[int, int] | None:
        rows, frames = smallest_at_least(self.batch_buckets, num_rows), smallest_at_least(self.frame_buckets, num_frames)
        return None if rows is None or frames is None else (rows, frames)

    @torch.inference_mode()
    def decode_stream(self, states: list[CodecStreamState],
                      codes: list[torch.Tensor]) -> tuple[list[torch.Tensor], list[CodecStreamState]]:
        """As `Codec.decode_stream` (fresh output tensors: the pool is reused by the next replay)."""
        lengths = [c.shape[0] for c in codes]
        bucket = self.bucket_for(len(codes), max(lengths)) if states and min(lengths) >= 1 else None
        if bucket is None or len(states) != len(codes):
            return self.codec.decode_stream(states, codes)
        self._fill(bucket, states, codes)
        graph, (audio, new_state) = self._graph(bucket)
        graph.replay()
        spf = self.codec.samples_per_frame
        # one copy out of the pool for the batch's audio, each row a view of it (short-lived: the lane sends it on)
        batch_audio = audio[: len(codes), : max(lengths) * spf].clone()
        return [batch_audio[row, : n * spf] for row, n in enumerate(lengths)], split_states(new_state, len(states))

    def _fill(self, bucket: tuple[int, int], states: list[CodecStreamState], codes: list[torch.Tensor]) -> None:
        rows, frames = bucket
        lengths = [c.shape[0] for c in codes]
        self.codes[:rows, :frames].zero_()
        self.num_new[:rows].fill_(frames)
        if min(lengths) == max(lengths):  # the usual call: one copy, not one per row
            self.codes[: len(codes), : lengths[0]].copy_(torch.stack(codes))
        else:
            for row, row_codes in enumerate(codes):
                self.codes[row, : row_codes.shape[0]].copy_(row_codes)
        self.num_new[: len(codes)].copy_(torch.tensor(lengths))
        for key, static in self.state.items():  # the rows' states gathered straight into the static input
            rows_in = static[: len(states)]
            torch.cat([s.tensors[key] for s in states], out=rows_in)
            if rows_in.shape[1:] != static.shape[1:]:  # `out` resized (a state of the wrong shape): not what replays
                raise ValueError(f"stream state {key!r} of shape {tuple(states[0].tensors[key].shape)} does not fit "
                                 f"the graphs' {tuple(static.shape[1:])}")
            static[len(states): rows].zero_()

    def capture_all(self) -> None:
        """Largest shapes first, so the shared pool is sized once and the smaller graphs reuse it."""
        for rows in reversed(self.batch_buckets):
            for frames in reversed(self.frame_buckets):
                self._graph((rows, frames))

    def _graph(self, bucket: tuple[int, int]) -> tuple[torch.cuda.CUDAGraph, tuple]:
        if bucket not in self._graphs:
            self._graphs[bucket] = self._capture(*bucket)
        return self._graphs[bucket]

    @torch.inference_mode()
    def _capture(self, rows: int, frames: int) -> tuple[torch.cuda.CUDAGraph, tuple]:
        self.codes[:rows, :frames].zero_()
        self.num_new[:rows].fill_(frames)

        def step() -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
            # every row is cut by a gather: in the graph, row lengths are data, not shapes
            carry = StreamCarry({k: v[:rows] for k, v in self.state.items()}, self.num_new[:rows], frames)
            return self.codec.decode_with_carry(self.codes[:rows, :frames], carry), carry.new_state

        [(graph, outputs)] = capture_steps([step], self._pool)
        return graph, outputs
