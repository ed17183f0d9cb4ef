"""Pacing: who gets a row when more streams can decode than a step has rows."""
from __future__ import annotations

import pytest

from scheduler import PacedStream, pick_rows


def picked(streams: list[PacedStream], max_batch: int) -> list[str]:
    return [streams[i].request_id for i in pick_rows(streams, max_batch)]


def test_everyone_runs_when_the_step_has_room():
    streams = [PacedStream("a", 0.0, 4.0), PacedStream("b", 1.0, None)]
    assert picked(streams, max_batch=2) == ["a", "b"]


def test_streams_without_audio_first_then_the_least_buffered_then_the_oldest():
    streams = [PacedStream("ahead", 0.0, 4.5), PacedStream("behind", 0.0, 0.2), PacedStream("new", 3.0, None),
               PacedStream("newer", 4.0, None), PacedStream("tied-late", 2.0, 1.0), PacedStream("tied-early", 1.0, 1.0)]
    assert picked(streams, max_batch=4) == ["behind", "new", "newer", "tied-early"]  # in their given order
    assert pick_rows(streams, max_batch=4) == [1, 2, 3, 5]
    assert set(picked(streams, max_batch=5)) == {"new", "newer", "behind", "tied-early", "tied-late"}


def test_a_stalling_stream_goes_before_one_that_is_merely_low():
    streams = [PacedStream("low", 0.0, 0.1), PacedStream("stalling", 5.0, -0.3)]
    assert picked(streams, max_batch=1) == ["stalling"]


def test_streams_that_share_an_id_are_still_counted_apart():
    streams = [PacedStream("same", 0.0, 1.0), PacedStream("same", 0.0, 0.5), PacedStream("same", 0.0, 2.0)]
    assert pick_rows(streams, max_batch=2) == [0, 1]


def test_max_batch_must_be_positive():
    with pytest.raises(ValueError):
        pick_rows([], max_batch=0)
