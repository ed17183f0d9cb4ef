"""The playback clock of one request: when each chunk must reach the client.

Playback starts when chunk 0 is sent (`t_first`). Chunk i is due at
`t_first + offset(i)`, where `offset(i)` is the audio duration of chunks
0..i-1. The schedule is fixed: a late chunk does not push later deadlines back
(the client's re-buffering is not modelled), which errs towards urgency.
"""
from __future__ import annotations

import threading


class PlaybackClock:
    """Deadlines of one request's chunks. Times are seconds on the caller's clock.

    Durations become known when the LM emits a chunk (`on_emitted`, duration
    from its frame count) or when the chunk is sent (`on_sent`, the duration of
    the PCM actually sent, which wins). Both must be called in chunk order.
    Thread-safe: the LM-reading thread and the sending thread may differ.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._durations: list[float] = []  # seconds, by chunk index
        self._num_sent = 0
        self._t_first: float | None = None

    @property
    def t_first(self) -> float | None:
        """When chunk 0 was sent (playback start), or None while it is in flight."""
        return self._t_first

    @property
    def num_sent(self) -> int:
        return self._num_sent

    @property
    def is_playing(self) -> bool:
        return self._t_first is not None

    def on_emitted(self, chunk_index: int, duration_s: float) -> None:
        """Record the duration of a chunk the LM just emitted (before it is routed)."""
        _check_duration(duration_s)
        with self._lock:
            if chunk_index != len(self._durations):
                raise ValueError(f"chunk {chunk_index} emitted out of order: expected {len(self._durations)}")
            self._durations.append(duration_s)

    def on_sent(self, chunk_index: int, duration_s: float, now: float) -> None:
        """Record that chunk `chunk_index` of `duration_s` seconds reached the client at `now`."""
        _check_duration(duration_s)
        with self._lock:
            if chunk_index != self._num_sent:
                raise ValueError(f"chunk {chunk_index} sent out of order: expected {self._num_sent}")
            if chunk_index < len(self._durations):
                self._durations[chunk_index] = duration_s
            else:
                self._durations.append(duration_s)
            if chunk_index == 0:
                self._t_first = now
            self._num_sent += 1

    def offset(self, chunk_index: int) -> float:
        """Audio seconds before chunk `chunk_index`; needs the durations of all earlier chunks."""
        with self._lock:
            if not 0 <= chunk_index <= len(self._durations):
                raise ValueError(f"offset of chunk {chunk_index} needs durations of chunks "
                                 f"0..{chunk_index - 1}; {len(self._durations)} known")
            return sum(self._durations[:chunk_index])

    def deadline(self, chunk_index: int) -> float | None:
        """When chunk `chunk_index` must reach the client; None while chunk 0 is in flight."""
        t_first = self._t_first
        if t_first is None:
            return None
        return t_first + self.offset(chunk_index)

    def slack(self, chunk_index: int, now: float, expected_latency: float) -> float | None:
        """deadline - now - expected_latency; None while chunk 0 is in flight."""
        deadline = self.deadline(chunk_index)
        if deadline is None:
            return None
        return deadline - now - expected_latency


def _check_duration(duration_s: float) -> None:
    if not duration_s >= 0.0:
        raise ValueError(f"duration_s must be >= 0, got {duration_s}")
