"""A codec lane's streaming decoder states, keyed by stream id, bounded and freed when told.

Bookkeeping only (plain Python around opaque state objects); the runner owns the tensors' use. A
state remembers how many frames of its stream it has consumed: a chunk that starts exactly there
continues from it; any other chunk (the stream's first in this lane, or one after a chunk that went
to the other lane) finds none and rebuilds one from its window. States are dropped when their stream
ends or is cancelled, least recently used first beyond `max_states` or `max_bytes`, and after
`idle_timeout_s` without a chunk (a stream whose end this lane never heard of).

Not thread-safe: the one thread that runs the lane's batches owns its store.
"""
from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable

from backend_python.models.codec_stream import CodecStreamState


@dataclass(frozen=True)
class CodecStateLimits:
    """How much streaming state one codec lane may hold."""

    max_states: int = 256
    max_bytes: int = 1 << 30  # a full-size 12 Hz decoder in bf16 keeps ~2.6 MB per stream: ~400 streams
    idle_timeout_s: float = 30.0  # a live stream sends a chunk every 0.8 s of audio it plays

    def __post_init__(self) -> None:
        if self.max_states < 1 or self.max_bytes < 1:
            raise ValueError(f"max_states and max_bytes must be >= 1: {self}")
        if not self.idle_timeout_s > 0:
            raise ValueError(f"idle_timeout_s must be > 0, got {self.idle_timeout_s}")


@dataclass
class StoredState:
    state: CodecStreamState
    num_frames: int  # frames of its stream the state has consumed: the next chunk must start here
    num_bytes: int
    last_used: float


@dataclass
class StoreCounters:
    """Why chunks did or did not find a state, and why states left."""

    num_hits: int = 0  # a state at the chunk's start frame
    num_misses: int = 0  # no state for the stream
    num_gaps: int = 0  # a state at another frame (a chunk went to the other lane): dropped
    num_evicted: int = 0  # over max_states / max_bytes
    num_expired: int = 0  # idle past the timeout
    num_freed: int = 0  # the stream ended or was cancelled


class CodecStateStore:
    """stream id -> its decoder state and the number of frames it has consumed, least recently used first."""

    def __init__(self, limits: CodecStateLimits, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self._clock = clock
        self._states: OrderedDict[str, StoredState] = OrderedDict()
        self.num_bytes = 0
        self.counters = StoreCounters()

    @property
    def num_states(self) -> int:
        return len(self._states)

    def __contains__(self, stream_id: str) -> bool:
        return stream_id in self._states

    def take(self, stream_id: str, start_frame: int) -> CodecStreamState | None:
        """Remove and return the stream's state if it has consumed exactly `start_frame` frames.

        A state at any other frame cannot continue this chunk and is dropped; the caller rebuilds
        one and `put`s it back (a failed decode thus leaves no stale state behind).
        """
        entry = self._pop(stream_id)
        if entry is None:
            self.counters.num_misses += 1
            return None
        if entry.num_frames != start_frame:
            self.counters.num_gaps += 1
            return None
        self.counters.num_hits += 1
        return entry.state

    def put(self, stream_id: str, state: CodecStreamState, num_frames: int) -> None:
        """Keep `state`, which has consumed the stream's first `num_frames` frames; evicts beyond the limits."""
        self._pop(stream_id)
        entry = StoredState(state, num_frames, state.num_bytes, self._clock())
        self._states[stream_id] = entry
        self.num_bytes += entry.num_bytes
        while self._states and (len(self._states) > self.limits.max_states or self.num_bytes > self.limits.max_bytes):
            self._pop(next(iter(self._states)))
            self.counters.num_evicted += 1

    def free(self, stream_id: str) -> bool:
        """Drop the stream's state (it finished or was cancelled); False when there was none."""
        if self._pop(stream_id) is None:
            return False
        self.counters.num_freed += 1
        return True

    def expire_idle(self) -> int:
        """Drop the states unused for longer than the idle timeout; returns how many."""
        deadline = self._clock() - self.limits.idle_timeout_s
        expired = [sid for sid, entry in self._states.items() if entry.last_used < deadline]
        for stream_id in expired:
            self._pop(stream_id)
        self.counters.num_expired += len(expired)
        return len(expired)

    def _pop(self, stream_id: str) -> StoredState | None:
        entry = self._states.pop(stream_id, None)
        if entry is not None:
            self.num_bytes -= entry.num_bytes
        return entry
