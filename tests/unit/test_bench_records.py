"""TTFA, stalls and the SLO on hand-made timelines (playback starts at the first chunk's arrival)."""
import pytest

from clients.bench.records import Chunk, RequestRecord, Slo, evaluate, stalls

SLO = Slo(ttfa_s=0.2)


def record(arrivals_and_durations, sent=1.0, error=None, done=10.0):
    chunks = tuple(Chunk(i, at, d, "background") for i, (at, d) in enumerate(arrivals_and_durations))
    return RequestRecord("r", "u", sent, sent, sum(d for _, d in arrivals_and_durations), chunks, done, error)


def test_chunk_exactly_on_time_is_not_a_stall():
    # chunk 0 plays [1.5, 2.0); chunk 1 arrives at 2.0 exactly; chunk 2 plays from 2.5 and arrives at 2.5
    r = record([(1.5, 0.5), (2.0, 0.5), (2.5, 0.25)], sent=1.4)
    assert stalls(r.chunks) == []
    outcome = evaluate(r, SLO)
    assert outcome.ttfa_s == pytest.approx(0.1) and outcome.num_stalls == 0 and outcome.meets_slo


def test_late_chunk_stall_time_and_playback_resumes_from_its_arrival():
    # chunk 1 due at 1.5, arrives 1.8 (0.3 s stall), plays to 2.3; chunk 2 arrives 2.4 (0.1 s stall)
    r = record([(1.0, 0.5), (1.8, 0.5), (2.4, 0.5), (2.6, 0.5)], sent=0.9)
    assert [(i, round(w, 9)) for i, w in stalls(r.chunks)] == [(1, 0.3), (2, 0.1)]
    outcome = evaluate(r, SLO)
    assert outcome.num_stalls == 2 and outcome.stall_s == pytest.approx(0.4)
    assert outcome.stalled_chunks == (1, 2) and not outcome.meets_slo


def test_early_chunks_build_a_buffer_that_absorbs_a_later_gap():
    # all audio (3 s) has arrived by 1.2; a long gap before the last chunk is still on time
    r = record([(1.0, 1.0), (1.1, 1.0), (1.2, 1.0), (3.9, 1.0)], sent=0.95)
    assert stalls(r.chunks) == [] and evaluate(r, SLO).meets_slo


def test_ttfa_over_the_target_misses_the_slo_at_the_target_it_meets():
    assert evaluate(record([(1.2, 1.0)], sent=1.0), SLO).meets_slo  # exactly 200 ms
    late = evaluate(record([(1.2001, 1.0)], sent=1.0), SLO)
    assert late.ttfa_s == pytest.approx(0.2001) and late.num_stalls == 0 and not late.meets_slo


def test_errors_and_unfinished_streams_miss_the_slo():
    errored = evaluate(record([(1.05, 0.5)], error="boom"), SLO)
    assert not errored.is_complete and not errored.meets_slo
    no_audio = evaluate(record([], error="input 'text' is empty"), SLO)
    assert no_audio.ttfa_s is None and not no_audio.meets_slo
    unfinished = evaluate(record([(1.05, 0.5)], done=None), SLO)
    assert not unfinished.is_complete and not unfinished.meets_slo


def test_record_round_trips_through_json():
    r = record([(1.0, 0.5), (1.4, 0.5)])
    assert RequestRecord.from_json(r.to_json()) == r
