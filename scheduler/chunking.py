"""Which frames of a request form the chunks that are sent to the codec.

Chunk 0 holds `first_chunk_frames` frames (small, to cut time-to-first-audio).
Without `chunk_growth`, every later chunk holds `chunk_frames`. With `chunk_growth` g,
chunk k holds min(chunk_frames, ceil(first * g**k)) frames: sizes ramp up (2,
4, 8, 10, 10, … for first 2, g 2, chunk 10), so each chunk's audio lasts long
enough to cover generating and decoding the next one. When the request
finishes, the frames left after the last complete chunk form one shorter final
chunk.

A stream's plan follows the LM's load when it is admitted (`for_stream`):
- with `first_chunk_frames_idle`, a request gets that many frames first (smaller: its time to first audio is one
  LM step shorter) when it starts alone, or when the LM has room for it: the first chunk's audio lasts
  `first_chunk_room` times what making the next chunk takes (its frames at the measured step time, and the
  codec's `next_chunk_codec_s`), so playback starts early and still never waits for chunk 1. A 12.5 Hz model on an
  H200 (80 ms frames, the next chunk 2 frames): room while a step takes up to 10 ms, about 32 rows;
- past `busy_streams` running streams, a coarser plan where one is set: `first_chunk_frames_busy` first (fewer
  urgent first-chunk calls) and `chunk_frames_busy` frames a chunk (fewer codec windows, each carrying its left
  context, for the lanes that give out first under load).
The rest of its ramp grows from its first chunk.

A model family may bring a plan of its own (its description's `chunk_plan`); one on the default ramp starts a lone
request on a GPU with `GPU_IDLE_FIRST_CHUNK_FRAMES`.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

# On a GPU, a request that starts with no other stream running sends its first chunk after one frame where the
# family takes the default ramp: one LM frame sooner (a 12.5 Hz 1.7B model on an H200: idle TTFA 23.3 vs 28.8 ms),
# and, acting only on a lone request, it cannot cost capacity (BENCHMARKS.md, "Lever: the first chunk from the LM's
# load"). Not on the CPU, whose end-to-end tests pin the plan; `--first-chunk-frames-idle 0` turns it off.
GPU_IDLE_FIRST_CHUNK_FRAMES = 1


@dataclass(frozen=True)
class ChunkingConfig:
    """Chunk sizes in frames (codec frames, e.g. 12.5 a second)."""

    first_chunk_frames: int = 2  # small: cuts time to first audio
    chunk_frames: int = 10
    chunk_growth: float | None = 2.0  # sizes 2, 4, 8, 10, 10, …; None: straight to chunk_frames after chunk 0
    first_chunk_frames_idle: int | None = None  # a request that starts alone or with room (None: first_chunk_frames)
    first_chunk_frames_busy: int | None = None  # one that starts beside busy_streams running ones (None: the same)
    busy_streams: int = 16
    # the idle first chunk beside running streams while its audio lasts this many times the making of the next chunk
    # (0: only for a request that starts alone); the codec's time for that next chunk, in that rule
    first_chunk_room: float = 2.0
    next_chunk_codec_s: float = 0.02
    chunk_frames_busy: int | None = None  # the chunk of a stream admitted beside busy_streams running ones (None: same)

    def __post_init__(self) -> None:
        for name in ("first_chunk_frames", "chunk_frames", "busy_streams", "first_chunk_frames_idle",
                     "first_chunk_frames_busy", "chunk_frames_busy"):
            value = getattr(self, name)
            if value is None and name.endswith(("_idle", "_busy")):
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        growth = self.chunk_growth
        if growth is not None and not (isinstance(growth, (int, float)) and growth > 1.0):
            raise ValueError(f"chunk_growth must be > 1 (or None for no ramp), got {self.chunk_growth!r}")
        if not (self.first_chunk_room >= 0 and self.next_chunk_codec_s >= 0):
            raise ValueError(f"first_chunk_room and next_chunk_codec_s must be >= 0, got {self.first_chunk_room!r}, "
                             f"{self.next_chunk_codec_s!r}")

    def for_stream(self, num_running: int, step_s: float = 0.0, frame_s: float = 0.0) -> "ChunkingConfig":
        """The plan of a stream admitted beside `num_running` running streams, while an LM step takes `step_s`
        (0: not measured yet) and a frame is `frame_s` of audio: this one with its first chunk (and, past
        busy_streams, its chunk) chosen for it."""
        chunk = self.chunk_frames
        if num_running >= self.busy_streams and self.chunk_frames_busy is not None:
            chunk = self.chunk_frames_busy
        return dataclasses.replace(self, first_chunk_frames=self.first_chunk_frames_for(num_running, step_s, frame_s),
                                   chunk_frames=chunk)

    def first_chunk_frames_for(self, num_running: int, step_s: float = 0.0, frame_s: float = 0.0) -> int:
        """The first chunk of a request that starts beside `num_running` running streams (see `for_stream`)."""
        if num_running >= self.busy_streams and self.first_chunk_frames_busy is not None:
            return self.first_chunk_frames_busy
        idle = self.first_chunk_frames_idle
        if idle is not None and (num_running == 0 or self.has_room(idle, step_s, frame_s)):
            return idle
        return self.first_chunk_frames

    def has_room(self, first: int, step_s: float, frame_s: float) -> bool:
        """Whether a first chunk of `first` frames plays long enough to cover making the next chunk, with the
        margin `first_chunk_room` (False while the step time is unknown)."""
        if step_s <= 0 or frame_s <= 0 or self.first_chunk_room <= 0:
            return False
        following = dataclasses.replace(self, first_chunk_frames=first).size(1)
        return first * frame_s >= self.first_chunk_room * (following * step_s + self.next_chunk_codec_s)

    def size(self, index: int) -> int:
        """Frames in complete chunk `index`."""
        if index == 0:
            return self.first_chunk_frames
        if self.chunk_growth is None:
            return self.chunk_frames
        return min(self.chunk_frames, math.ceil(self.first_chunk_frames * self.chunk_growth ** index))


@dataclass(frozen=True)
class ChunkSpan:
    """Chunk `index` covers frames [start, end); `is_last` marks the final chunk."""

    index: int
    start: int
    end: int
    is_last: bool = False

    @property
    def num_frames(self) -> int:
        return self.end - self.start


class ChunkPlan:
    """Stateless chunk boundaries for one `ChunkingConfig`."""

    def __init__(self, config: ChunkingConfig) -> None:
        self._config = config
        self._ramp_starts = [0]  # starts of the chunks while sizes still grow, then one full-size chunk
        while config.size(len(self._ramp_starts) - 1) < config.chunk_frames:
            self._ramp_starts.append(self._ramp_starts[-1] + config.size(len(self._ramp_starts) - 1))

    def start(self, index: int) -> int:
        """First frame of chunk `index`."""
        if index < 0:
            raise ValueError(f"chunk index must be >= 0, got {index}")
        last = len(self._ramp_starts) - 1  # from this chunk on, every chunk is full-size
        if index <= last:
            return self._ramp_starts[index]
        return self._ramp_starts[last] + (index - last) * self._config.chunk_frames

    def end(self, index: int) -> int:
        """One past the last frame of chunk `index` when the chunk is complete."""
        return self.start(index + 1)

    def ready_chunks(self, num_frames: int, num_chunks_emitted: int, is_finished: bool) -> list[ChunkSpan]:
        """Chunks to emit now, given `num_frames` generated so far.

        `num_chunks_emitted` chunks were already emitted. Only complete chunks
        are returned, except that a finished request also gets its shorter
        final chunk. No empty chunk is ever returned: a request that finishes
        exactly on a chunk boundary has its last complete chunk marked
        `is_last` only if that chunk is emitted in this same call.
        """
        if num_frames < 0 or num_chunks_emitted < 0:
            raise ValueError(f"counts must be >= 0, got {num_frames}, {num_chunks_emitted}")
        if self.start(num_chunks_emitted) > num_frames:
            raise ValueError(f"{num_chunks_emitted} chunks emitted but only {num_frames} frames")
        spans = []
        index = num_chunks_emitted
        while self.end(index) <= num_frames:
            spans.append(ChunkSpan(index, self.start(index), self.end(index)))
            index += 1
        if is_finished:
            spans = self._finish(spans, index, num_frames)
        return spans

    def _finish(self, spans: list[ChunkSpan], index: int, num_frames: int) -> list[ChunkSpan]:
        start = self.start(index)
        if start < num_frames:
            return spans + [ChunkSpan(index, start, num_frames, is_last=True)]
        if spans:
            last = spans[-1]
            spans[-1] = ChunkSpan(last.index, last.start, last.end, is_last=True)
        return spans
