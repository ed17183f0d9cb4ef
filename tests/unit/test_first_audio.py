"""A request's server-side TTFA cut into consecutive phases (scheduler/first_audio.py): they add up to it, the LM's
stamps out of order fall back to one `lm` phase, and the engine stamps a stream's first chunk and no other."""
from __future__ import annotations

import pytest

from scheduler import FIRST_AUDIO_PHASES, LMStamps, first_audio_phases
from scheduler.first_audio import LM_PHASE
from tests.unit.test_engine import lm, make_engine, make_seq, run_until_done  # noqa: F401 (lm: a fixture)


def test_the_phases_are_consecutive_and_add_up_to_the_ttfa():
    stamps = LMStamps(arrival=10.002, admitted=10.010, prefilled=10.018, emitted=10.030)
    phases = first_audio_phases(10.000, stamps, received=10.031, decoded=10.040, sent=10.0415)
    assert tuple(phases) == FIRST_AUDIO_PHASES
    assert phases == pytest.approx({"to_lm": 0.002, "queue": 0.008, "prefill": 0.008, "frames": 0.012,
                                    "channel": 0.001, "codec": 0.009, "send": 0.0015})
    assert sum(phases.values()) == pytest.approx(0.0415)


@pytest.mark.parametrize("stamps", [None, LMStamps(10.002, 10.001, 10.018, 10.030),  # admitted before its arrival
                                    LMStamps(9.990, 10.010, 10.018, 10.030),  # the LM took it before the router saw it
                                    LMStamps(10.002, 10.010, 10.018, 10.032)],  # emitted after the router received it
                         ids=["none", "admitted_first", "before_arrival", "after_receipt"])
def test_without_ordered_lm_stamps_the_lm_phases_are_one(stamps):
    phases = first_audio_phases(10.000, stamps, received=10.031, decoded=10.040, sent=10.0415)
    assert phases == pytest.approx({LM_PHASE: 0.031, "codec": 0.009, "send": 0.0015})
    assert all(value >= 0 for value in phases.values())


def test_stamps_come_as_four_values():
    assert LMStamps.from_values([1, 2, 3, 4]) == LMStamps(1.0, 2.0, 3.0, 4.0)
    with pytest.raises(ValueError, match="4 values"):
        LMStamps.from_values([1.0, 2.0, 3.0])


def test_the_engine_stamps_each_streams_first_chunk_in_order(lm):  # noqa: F811 (the fixture)
    engine = make_engine(lm)
    (first, first_sink), (second, second_sink) = (make_seq(lm, text, frames=9, seed=i)
                                                  for i, text in enumerate(("First one.", "Second one.")))
    engine.add(first)
    engine.add(second)
    run_until_done(engine, [first_sink, second_sink])
    for seq, sink in ((first, first_sink), (second, second_sink)):
        assert sink.error is None and len(sink.chunks) > 1
        stamps = LMStamps(*sink.chunks[0].first_stamps)
        assert seq.arrival_time <= stamps.admitted <= stamps.prefilled <= stamps.emitted
        assert (stamps.arrival, stamps.admitted, stamps.prefilled, stamps.emitted) == \
            (seq.arrival_time, seq.t_admitted, seq.t_prefilled, seq.t_first_emitted)
        assert all(chunk.first_stamps is None for chunk in sink.chunks[1:])
