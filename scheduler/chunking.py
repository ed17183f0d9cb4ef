"""How a stream's chunks are sized: the sizes (`protocol/chunks.py`, which has the ramp's arithmetic and
the boundaries), and the choice of a stream's first chunk by the LM's load.

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
from dataclasses import dataclass

from protocol.chunks import ChunkPlan, ChunkSizes, ChunkSpan

# ChunkPlan and ChunkSpan live in protocol.chunks (a client needs them too); the scheduler's users import them here
__all__ = ["ChunkPlan", "ChunkSpan", "ChunkingConfig"]

# On a GPU, a request that starts with no other stream running sends its first chunk after one frame where the
# family takes the default ramp: one LM frame sooner (a 12.5 Hz 1.7B model on an H200: idle TTFA 23.3 vs 28.8 ms),
# and, acting only on a lone request, it cannot cost capacity (BENCHMARKS.md, "Lever: the first chunk from the LM's
# load"). Not on the CPU, whose end-to-end tests pin the plan; `--first-chunk-frames-idle 0` turns it off.
GPU_IDLE_FIRST_CHUNK_FRAMES = 1


@dataclass(frozen=True)
class ChunkingConfig:
    """Chunk sizes in frames (codec frames, e.g. 12.5 a second)."""

    first_chunk_frames: int = ChunkSizes.first_chunk_frames  # small: cuts time to first audio
    chunk_frames: int = ChunkSizes.chunk_frames
    chunk_growth: float | None = ChunkSizes.chunk_growth  # see ChunkSizes; None: no ramp
    first_chunk_frames_idle: int | None = None  # a request that starts alone or with room (None: first_chunk_frames)
    first_chunk_frames_busy: int | None = None  # one that starts beside busy_streams running ones (None: the same)
    busy_streams: int = 16
    # the idle first chunk beside running streams while its audio lasts this many times the making of the next chunk
    # (0: only for a request that starts alone); the codec's time for that next chunk, in that rule
    first_chunk_room: float = 2.0
    next_chunk_codec_s: float = 0.02
    chunk_frames_busy: int | None = None  # the chunk of a stream admitted beside busy_streams running ones (None: same)

    def __post_init__(self) -> None:
        self.sizes  # ChunkSizes checks first_chunk_frames, chunk_frames and chunk_growth
        for name in ("busy_streams", "first_chunk_frames_idle", "first_chunk_frames_busy", "chunk_frames_busy"):
            value = getattr(self, name)
            if value is None and name.endswith(("_idle", "_busy")):
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
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

    @property
    def sizes(self) -> ChunkSizes:
        return ChunkSizes(self.first_chunk_frames, self.chunk_frames, self.chunk_growth)

    def size(self, index: int) -> int:
        """Frames in complete chunk `index`."""
        return self.sizes.size(index)
