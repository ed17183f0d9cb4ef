"""One request's life in the LM engine: its prompt, sampling, slot and frames."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Protocol

import torch

from backend_python.engine.word_clock import WordClock, WordTime
from backend_python.models.base import Prompt, SamplingParams, TextFeed
from backend_python.models.delay_pattern import FrameAssembler
from scheduler import Extent, UnreadBound


class SeqStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(frozen=True)
class Chunk:
    """A window of frames ready for the codec: `context_frames` of left context, then new frames, then
    `lookahead_frames` after them (a codec that needs right context: CodecShape.lookahead_frames)."""

    chunk_index: int
    tokens: torch.Tensor  # [context_frames + new_frames + lookahead_frames, K] int64, cpu
    context_frames: int
    # inline lane only: [(new_frames + overlap_frames) * samples_per_frame] float32, cpu
    audio: torch.Tensor | None = None
    start_frame: int = 0  # the request's index of the first new frame (a codec lane's stream state keys on it)
    is_last: bool = False  # the request's final chunk
    lookahead_frames: int = 0
    # frames of audio past the new ones that the codec returns too (decoded from the lookahead), to be
    # cross-faded into the stream's next chunk: min(CodecShape.overlap_frames, lookahead_frames)
    overlap_frames: int = 0
    condition: torch.Tensor | None = None  # [D] float32, cpu: the stream's codec condition (SpeechLM.codec_condition)
    words: tuple[WordTime, ...] | None = None  # the words it speaks (word_clock.py); None: not asked for
    # a cascade's stream context for its refinement lane ([n] int32, cpu: SpeechLM.refine_context); None: none
    refine_context: torch.Tensor | None = None
    segment_start: int = 0  # a cascade's chunk: the stream's index of its segment's first frame (refined alone)
    # chunk 0 only: the engine's (arrival, admitted, prefilled, emitted) of its stream (scheduler/first_audio.py)
    first_stamps: tuple[float, float, float, float] | None = None

    @property
    def num_new_frames(self) -> int:
        return self.tokens.shape[0] - self.context_frames - self.lookahead_frames


class ChunkSink(Protocol):
    """Where the engine delivers a request's chunks (the Triton response sender, or a test list)."""

    def emit(self, chunk: Chunk) -> None: ...

    def finish(self, error) -> None:
        """The request's end: None (done), EndReason.CANCELLED, an error string (internal) or an `Ended`."""


@dataclass
class SegmentCursor:
    """A segmented request's current segment (engine/segments.py): where it starts in the stream, its progress."""

    index: int = 0  # segments ended before it; a launched step's rows remember it (a row of an older one is dropped)
    first_frame: int = 0  # the stream's index of the segment's first frame
    chunks_from: tuple[int, int] = (0, 0)  # (frame, chunk index) where the chunk plan starts anew: a segment's
    # first frame, or where a segment waiting at its limit sent the frames it held
    num_launched: int = 0  # frames launched in the segment (a delayed family: its steps, of which the first
    # Sequence.num_delay_steps complete no frame)
    is_over: bool = False  # spoken: the next segment is not prefilled yet


@dataclass
class Sequence:
    request_id: str
    prompt: Prompt | None  # None: a streaming-text request whose prompt's text has not arrived yet
    sampling: SamplingParams
    ignore_eos: bool
    max_frames: int
    sink: ChunkSink
    generator: torch.Generator
    slot: int | None = None
    status: SeqStatus = SeqStatus.WAITING
    frames: list[torch.Tensor] = field(default_factory=list)  # each [K] int64, cpu: complete frames only
    num_chunks: int = 0
    is_cancelled: bool = False
    arrival_time: float = 0.0  # engine clock, set by LMEngine.add
    t_first_emitted: float | None = None  # engine clock, when chunk 0 left the engine
    t_admitted: float | None = None  # engine clock, when it was first admitted (a slot and its KV extent)
    t_prefilled: float | None = None  # engine clock, when its first prefill ended
    unread: UnreadBound | None = None  # backpressure (scheduler/flow.py); None: never paused
    emitted_frames: int = 0  # frames in the chunks handed to the sink
    text: TextFeed | None = None  # a streaming-text request's text (more may come until it is closed)
    text_idle_timeout_s: float = 30.0  # an open text with no new piece this long ends the request
    text_at: float = 0.0  # engine clock, its latest text piece (or its arrival)
    segment: SegmentCursor = field(default_factory=SegmentCursor)  # only a segmented text moves it on
    codec_prefix: torch.Tensor | None = None  # [T, K] int64, cpu: frames before frame 0, the codec's left context
    # for the first chunks (an in-context clone's reference codes: SpeechLM.codec_prefix)
    first_chunk_frames: int | None = None  # its chunk plan's first chunk, chosen from the load when admitted
    chunk_frames: int | None = None  # its chunk plan's chunk, the same
    codec_condition: torch.Tensor | None = None  # [D] float32, cpu: its codec's condition (SpeechLM.codec_condition)
    # a cascade's refined codebooks of its first frames, in timeshare (the refiner runs inline): [frames, K - 1]
    refined: torch.Tensor | None = None
    kv_extent: Extent | None = None  # its positions in a pooled KV cache while it holds a slot
    words: WordClock | None = None  # its word timestamps, when the client asked for them (`timestamps`)
    assembler: FrameAssembler | None = None  # a delayed family's partial frames since its (segment's) prefill

    @property
    def num_delay_steps(self) -> int:
        """Steps its frames trail its decode steps by (a delayed family's largest delay; 0 undelayed)."""
        return 0 if self.assembler is None else self.assembler.pattern.max_delay

    @property
    def is_segmented(self) -> bool:
        """Its streamed text is spoken segment by segment, each its own prompt in the same slot."""
        return self.text is not None and self.text.is_segmented

    @property
    def is_text_open(self) -> bool:
        return self.text is not None and not self.text.is_closed

    @property
    def is_input_open(self) -> bool:
        """An interleaved model's stream whose input may still grow (models/input_feed.py)."""
        return self.prompt is not None and self.prompt.input is not None and not self.prompt.input.is_closed

    def text_deadline(self) -> float | None:
        """When its open text, or its open input, times out (engine clock); None when it is whole."""
        return self.text_at + self.text_idle_timeout_s if self.is_text_open or self.is_input_open else None

    def is_paused(self, now: float) -> bool:
        """Whether its client has fallen the bound behind: decode nothing for it now."""
        return self.unread is not None and self.unread.is_paused(self.emitted_frames, now, self.t_first_emitted)

    def buffered_s(self, now: float, frame_rate: float) -> float | None:
        """Audio emitted and not yet taken by its listener (acked, or played in real time); None: no audio yet."""
        if self.t_first_emitted is None:
            return None
        taken = (self.unread.taken(now, self.t_first_emitted) if self.unread is not None
                 else (now - self.t_first_emitted) * frame_rate)
        return (self.emitted_frames - taken) / frame_rate

    def resumes_at(self) -> float | None:
        """When a paused request goes on by itself (playback-paced), or None: it waits for an update."""
        return None if self.unread is None else self.unread.resumes_at(self.emitted_frames, self.t_first_emitted)

    @property
    def num_frames(self) -> int:
        return len(self.frames)

    @property
    def is_length_capped(self) -> bool:
        return self.num_frames >= self.max_frames
