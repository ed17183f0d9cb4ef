"""Runs a codec lane's batches: windowed decode, through CUDA graphs where the codec allows them, or,
with streaming states on, each stream's new frames from the state the lane keeps for it.

Windowed (the default, and always for codecs without `supports_streaming_state`): every chunk is
decoded with its left context, so any lane can take any chunk. Stateful (`stream_states` set): a
chunk that starts where its stream's state stopped decodes only its new frames; any other chunk
decodes its whole window from a fresh state (the same arithmetic as the windowed decode) and leaves
a state for the stream's next chunk. On CUDA the stateful runner replays the streaming decode's
graphs (and then decodes plain windows eagerly: a lane uses one path or the other).

A chunk of a codec with lookahead (models/base.py CodecWindowing) holds frames after its new ones; its window
is decoded whole and the chunk gets its new frames' samples plus min(overlap_frames, lookahead) frames past
them, which the router cross-fades into the stream's next chunk. Such codecs are not causal, so they keep no
stream state, unless the state covers a causal stage behind the non-causal one (`state_reads_windows`,
a causal re-synthesis behind a DAC decoder): then a chunk with a state decodes its window cut to the codec's
`state_context_frames` of left context (its lookahead kept), and one without decodes its whole window from a
fresh state (`Codec.decode_stream_windows`).

A decode that raises puts back the states it took (they are not modified), so the chunks retried alone, and
every other stream of the batch, continue from them.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import torch

from backend_python.engine.codec_states import CodecStateLimits, CodecStateStore
from backend_python.models.base import Codec
from backend_python.models.graphs.codec import CodecGraphs
from backend_python.models.codec_stream import CodecStreamState, StreamWindow
from backend_python.models.graphs.codec_stream import CodecStreamGraphs


@dataclass(frozen=True)
class StreamChunk:
    """One chunk of a stream as a codec lane receives it."""

    stream_id: str
    codes: torch.Tensor  # [context_frames + num_new + lookahead_frames, K] int64: left context first
    context_frames: int
    start_frame: int  # the stream's index of the chunk's first new frame
    is_last: bool = False  # the stream ends with this chunk: its state is freed
    lookahead_frames: int = 0  # frames after the new ones (right context)
    condition: torch.Tensor | None = None  # [condition_dim] float32: the stream's codec condition

    def __post_init__(self) -> None:
        # the context may reach before frame 0: an in-context clone's reference codes (Sequence.codec_prefix)
        if (self.context_frames < 0 or self.lookahead_frames < 0 or self.start_frame < 0
                or self.context_frames + self.lookahead_frames >= self.codes.shape[0]):
            raise ValueError(f"{self.context_frames} context and {self.lookahead_frames} lookahead frames leave "
                             f"no new frame in a {self.codes.shape[0]}-frame window starting at frame "
                             f"{self.start_frame}")

    @property
    def num_new(self) -> int:
        return self.codes.shape[0] - self.context_frames - self.lookahead_frames


@dataclass
class FrameCounts:
    """Frames the codec decoded (context included, padding not) against the new frames it returned."""

    num_decoded: int = 0
    num_new: int = 0

    @property
    def decoded_per_new(self) -> float:
        return self.num_decoded / self.num_new if self.num_new else 0.0


class CodecRunner:
    """One codec plus, on CUDA, its graphs over batch and window-length buckets, and optionally the
    lane's streaming states."""

    def __init__(self, codec: Codec, use_cuda_graphs: bool = True, stream_states: CodecStateLimits | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.codec = codec
        can_graph = use_cuda_graphs and codec.supports_cuda_graphs and codec.device.type == "cuda"
        is_stateful = stream_states is not None and codec.supports_streaming_state
        self.states = CodecStateStore(stream_states, clock) if is_stateful else None  # None: windowed
        self.graphs = CodecGraphs(codec) if can_graph and not is_stateful else None
        self._own_graphs = use_cuda_graphs and codec.device.type == "cuda" and self.graphs is None and not is_stateful
        self.stream_graphs = CodecStreamGraphs(codec) if can_graph and is_stateful and not codec.state_reads_windows \
            else None
        self._decode_stream = self.stream_graphs.decode_stream if self.stream_graphs else codec.decode_stream
        self.frames = FrameCounts()
        if codec.device.type == "cuda" and self.graphs is None and self.stream_graphs is None:
            # eager windows come in every batch size and length: cuDNN's benchmark mode would tune each new
            # shape's convolutions anew, seconds per call (process-wide: the lane's codec decides it)
            torch.backends.cudnn.benchmark = False

    def warm_up(self) -> None:
        """Capture every bucket up front (or run one eager window), so no request pays for it."""
        if self.stream_graphs is not None:
            self.stream_graphs.capture_all()
        elif self.states is not None and self.codec.state_reads_windows:
            self.codec.decode_stream_windows([None], [StreamWindow(self._zero_codes(2), 0, 0, 0, is_last=True)])
        elif self.states is not None:
            self.codec.decode_stream([self.codec.new_stream_state()], [self._zero_codes(2)])
        elif self.graphs is not None:
            self.graphs.capture_all()
        else:
            if self._own_graphs:
                self.codec.capture_graphs()  # a flow decoder's steps, say (Codec.capture_graphs)
            self.decode_windows([(self._zero_codes(2), 0)])
        self.frames = FrameCounts()  # count the lane's chunks, not the warm-up

    @property
    def samples_per_frame(self) -> int:
        return self.codec.samples_per_frame

    @property
    def overlap_frames(self) -> int:
        return self.codec.overlap_frames

    @property
    def uses_stream_position(self) -> bool:
        return self.codec.uses_stream_position

    @torch.inference_mode()
    def decode_windows(self, windows: list[tuple[torch.Tensor, int]],
                       conditions: list[torch.Tensor | None] | None = None,
                       start_frames: list[int] | None = None) -> list[torch.Tensor]:
        """(codes [T_i, K] int64, context c_i) pairs -> each window's samples after its context, float32;
        `start_frames` for a codec that `uses_stream_position`."""
        self._count(sum(c.shape[0] for c, _ in windows), sum(c.shape[0] - ctx for c, ctx in windows))
        if start_frames is not None:
            return self.codec.decode_windows(windows, conditions, start_frames=start_frames)
        if self.graphs is None or conditions is not None:
            return self.codec.decode_windows(windows, conditions)
        padded = self.codec.pad_windows(windows)
        return self.codec.new_samples(self.graphs.decode(padded), windows)

    def decode_chunks(self, chunks: list[StreamChunk]) -> list[torch.Tensor]:
        """Each chunk's new samples [num_new * samples_per_frame] float32 (plus its overlap, where the codec has
        lookahead): stateful when the lane keeps states, else windowed (and then as `decode_windowed`)."""
        reads_windows = self.codec.state_reads_windows
        if self.states is None or any(c.condition is not None or (c.lookahead_frames and not reads_windows)
                                      for c in chunks):
            return decode_windowed(self, chunks)
        self.states.expire_idle()
        states = [self.states.take(c.stream_id, c.start_frame) for c in chunks]
        audio: list[torch.Tensor | None] = [None] * len(chunks)
        try:
            if reads_windows:
                self._decode_windows_from_states(chunks, states, audio)
            else:
                self._continue([i for i, s in enumerate(states) if s is not None], chunks, states, audio)
                self._rebuild([i for i, s in enumerate(states) if s is None], chunks, audio)
        except Exception:
            self._put_back(chunks, states)
            raise
        return audio

    def release_stream(self, stream_id: str) -> bool:
        """Free the stream's state (it was cancelled); False when the lane held none."""
        return self.states is not None and self.states.free(stream_id)

    def _continue(self, rows: list[int], chunks: list[StreamChunk], states: list, audio: list) -> None:
        """Rows whose state sits at their start frame: decode only the new frames."""
        if rows:
            new_codes = [chunks[i].codes[chunks[i].context_frames:] for i in rows]
            pieces, new_states = self._decode_stream([states[i] for i in rows], new_codes)
            self._keep(rows, chunks, pieces, new_states, audio, num_skipped=[0] * len(rows))

    def _rebuild(self, rows: list[int], chunks: list[StreamChunk], audio: list) -> None:
        """Rows without a usable state: decode the whole window from a fresh state, keep the new samples."""
        if rows:
            fresh = [self.codec.new_stream_state() for _ in rows]
            pieces, new_states = self._decode_stream(fresh, [chunks[i].codes for i in rows])
            self._keep(rows, chunks, pieces, new_states, audio, [chunks[i].context_frames for i in rows])

    def _decode_windows_from_states(self, chunks: list[StreamChunk], states: list, audio: list) -> None:
        """A codec whose state reads windows: every chunk in one call, each with its state's short window or,
        without one, its whole window; a returned state is kept for the stream's next chunk."""
        windows = [self._stream_window(chunk, state is not None) for chunk, state in zip(chunks, states)]
        pieces, new_states = self.codec.decode_stream_windows(states, windows)
        for i, (chunk, window, piece, state) in enumerate(zip(chunks, windows, pieces, new_states)):
            audio[i] = piece
            self._count(window.codes.shape[0], chunk.num_new)
            if state is not None and not chunk.is_last:
                self.states.put(chunk.stream_id, state, chunk.start_frame + chunk.num_new)

    def _stream_window(self, chunk: StreamChunk, has_state: bool) -> StreamWindow:
        """The chunk's window, its left context cut to the codec's `state_context_frames` where a state continues."""
        context = min(chunk.context_frames, self.codec.state_context_frames) if has_state else chunk.context_frames
        return StreamWindow(chunk.codes[chunk.context_frames - context:], context, chunk.lookahead_frames,
                            chunk.start_frame, chunk.is_last)

    def _put_back(self, chunks: list[StreamChunk], states: list) -> None:
        """A failed decode's taken states, back at their chunks' start frames (where no newer state was kept)."""
        for chunk, state in zip(chunks, states):
            if state is not None and chunk.stream_id not in self.states:
                self.states.put(chunk.stream_id, state, chunk.start_frame)

    def _keep(self, rows: list[int], chunks: list[StreamChunk], pieces: list[torch.Tensor],
              new_states: list[CodecStreamState], audio: list, num_skipped: list[int]) -> None:
        spf = self.codec.samples_per_frame
        for i, piece, state, skipped in zip(rows, pieces, new_states, num_skipped):
            chunk = chunks[i]
            audio[i] = piece[skipped * spf:]
            self._count(chunk.num_new + skipped, chunk.num_new)
            if not chunk.is_last:  # a last chunk's state was taken out of the store: dropping it frees it
                self.states.put(chunk.stream_id, state, chunk.start_frame + chunk.num_new)

    def _count(self, num_decoded: int, num_new: int) -> None:
        self.frames.num_decoded += num_decoded
        self.frames.num_new += num_new

    def _zero_codes(self, num_frames: int) -> torch.Tensor:
        return torch.zeros(num_frames, self.codec.num_codebooks, dtype=torch.long, device=self.codec.device)


def decode_windowed(codec, chunks: list[StreamChunk]) -> list[torch.Tensor]:
    """Decode chunks as plain windows (a `Codec` or a `CodecRunner`): each chunk's new samples, plus
    min(overlap_frames, lookahead) frames of samples past them."""
    conditions = [c.condition for c in chunks]
    conditions = None if all(c is None for c in conditions) else conditions
    windows = [(c.codes, c.context_frames) for c in chunks]
    if codec.uses_stream_position:  # a flow decoder lays out its noise by stream position
        audio = codec.decode_windows(windows, conditions, start_frames=[c.start_frame for c in chunks])
    else:
        audio = codec.decode_windows(windows, conditions)
    spf, overlap = codec.samples_per_frame, codec.overlap_frames
    return [a[: (c.num_new + min(overlap, c.lookahead_frames)) * spf] for a, c in zip(audio, chunks)]
