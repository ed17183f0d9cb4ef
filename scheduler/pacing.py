"""Pacing: which live streams get a row of the next decode step.

A stream needs only its real-time share of the LM: 12.5 frames per second of playback at a 12.5 Hz codec. So
the LM lane keeps many more streams resident than a step has rows, and each step runs the ones that need
frames most. Two rules, both here:

- **How far ahead** a stream may run: its lead over its listener is bounded (`UnreadBound`, flow.py:
  `max_unread_audio_s` of audio emitted and not yet taken); a stream at the bound is paused and costs
  memory, never a row.
- **Who yields** when more streams can decode than a step has rows (`max_batch`): the streams with the
  least audio buffered ahead of their listener go first, a stream with no audio yet (its first chunk is
  its time to first audio) before any playing one, oldest first; the streams with the most audio
  buffered wait a step.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class PacedStream:
    """A stream that can decode now, as pacing sees it."""

    request_id: str
    arrival_time: float
    buffered_s: float | None  # audio emitted and not yet played by its listener; None: no audio yet


def urgency(stream: PacedStream) -> tuple[float, float]:
    """Sort key: least buffered first (no audio yet: -inf), then the oldest."""
    buffered = -math.inf if stream.buffered_s is None else stream.buffered_s
    return buffered, stream.arrival_time


def pick_rows(streams: Sequence[PacedStream], max_batch: int) -> list[int]:
    """The indices (ascending) of the streams that get this step's rows: all of them if they fit, else the
    `max_batch` most urgent."""
    if max_batch < 1:
        raise ValueError(f"max_batch must be >= 1, got {max_batch}")
    if len(streams) <= max_batch:
        return list(range(len(streams)))
    return sorted(sorted(range(len(streams)), key=lambda i: urgency(streams[i]))[:max_batch])
