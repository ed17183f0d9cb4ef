"""Which frames of a request form the chunks that are sent to the codec.

Chunk 0 holds `first_chunk_frames` frames (small, to cut time-to-first-audio);
every later chunk holds `chunk_frames`. Chunk k >= 1 covers frames
[first + (k-1)*chunk, first + k*chunk). When the request finishes, the frames
left after the last complete chunk form one shorter final chunk.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ChunkingConfig:
    """Chunk sizes in frames (codec frames, e.g. 12.5 per second for Qwen3-TTS)."""

    first_chunk_frames: int = 4
    chunk_frames: int = 10

    def __post_init__(self) -> None:
        for name in ("first_chunk_frames", "chunk_frames"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")


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

    def start(self, index: int) -> int:
        """First frame of chunk `index`."""
        if index < 0:
            raise ValueError(f"chunk index must be >= 0, got {index}")
        if index == 0:
            return 0
        return self._config.first_chunk_frames + (index - 1) * self._config.chunk_frames

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
