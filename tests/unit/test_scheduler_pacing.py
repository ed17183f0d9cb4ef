"""Pacing: who gets a row when more streams can decode than a step has rows."""
from __future__ import annotations

import pytest

from scheduler import PacedStream, pick_rows


def test_everyone_runs_when_the_step_has_room():
    streams = [PacedStream("a", 0.0, 4.0), PacedStream("b", 1.0, None)]
    assert pick_rows(streams, max_batch=2) == ["a", "b"]


def test_streams_without_audio_first_then_the_least_buffered_then_the_oldest():
    streams = [PacedStream("ahead", 0.0, 4.5), PacedStream("behind", 0.0, 0.2), PacedStream("new", 3.0, None),
               PacedStream("newer", 4.0, None), PacedStream("tied-late", 2.0, 1.0), PacedStream("tied-early", 1.0, 1.0)]
    assert pick_rows(streams, max_batch=4) == ["new", "newer", "behind", "tied-early"]
    assert pick_rows(streams, max_batch=5) == ["new", "newer", "behind", "tied-early", "tied-late"]


def test_a_stalling_stream_goes_before_one_that_is_merely_low():
    streams = [PacedStream("low", 0.0, 0.1), PacedStream("stalling", 5.0, -0.3)]
    assert pick_rows(streams, max_batch=1) == ["stalling"]


def test_max_batch_must_be_positive():
    with pytest.raises(ValueError):
        pick_rows([], max_batch=0)
