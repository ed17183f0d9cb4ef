"""Which frames of a stream form each chunk: the sizes, and the boundaries they give.

Chunk 0 holds `first_chunk_frames` frames (small, to cut time-to-first-audio). Without `chunk_growth`,
every later chunk holds `chunk_frames`. With `chunk_growth` g, chunk k holds
min(chunk_frames, ceil(first * g**k)) frames: sizes ramp up (2, 4, 8, 10, 10, … for first 2, g 2,
chunk 10), so each chunk's audio lasts long enough to cover generating and decoding the next one. When
the request finishes, the frames left after the last complete chunk form one shorter final chunk.

Here, not in `scheduler/`, because a client needs the same arithmetic: the bench places each chunk's
frames (which text it needed, when) from the LM's config parameters alone. The scheduler's
`ChunkingConfig`, which also picks a stream's first chunk by the LM's load, sizes its chunks with
`ChunkSizes`.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from protocol.settings import read_settings


@dataclass(frozen=True)
class ChunkSizes:
    """Chunk sizes in frames (codec frames, e.g. 12.5 a second)."""

    first_chunk_frames: int = 2  # small: cuts time to first audio
    chunk_frames: int = 10
    chunk_growth: float | None = 2.0  # sizes 2, 4, 8, 10, 10, …; None: straight to chunk_frames after chunk 0

    def __post_init__(self) -> None:
        for name in ("first_chunk_frames", "chunk_frames"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        growth = self.chunk_growth
        if growth is not None and not (isinstance(growth, (int, float)) and growth > 1.0):
            raise ValueError(f"chunk_growth must be > 1 (or None for no ramp), got {self.chunk_growth!r}")

    def size(self, index: int) -> int:
        """Frames in complete chunk `index`."""
        if index == 0:
            return self.first_chunk_frames
        if self.chunk_growth is None:
            return self.chunk_frames
        return min(self.chunk_frames, math.ceil(self.first_chunk_frames * self.chunk_growth ** index))

    @classmethod
    def from_parameters(cls, params: Mapping[str, Any]) -> ChunkSizes:
        """The sizes in the LM's Triton config parameters (strings, or Triton's `{"string_value": "..."}`), read
        as `SchedulerConfig.from_dict` reads them (`chunk_growth` "none": no ramp); other keys are ignored,
        absent ones keep the defaults."""
        return read_settings(cls, params, ignore_unknown=True, what="chunk size parameter")


class Sizes(Protocol):
    """What a `ChunkPlan` reads: `ChunkSizes`, or the scheduler's `ChunkingConfig`."""

    chunk_frames: int

    def size(self, index: int) -> int: ...


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
    """Stateless chunk boundaries for one set of sizes."""

    def __init__(self, config: Sizes) -> None:
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
