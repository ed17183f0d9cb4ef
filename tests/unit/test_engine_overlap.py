"""The overlapped step (launch t+1 before reading t) serves the same chunks as the plain one, and the
engine's phase account covers its wall time."""
from __future__ import annotations

import pytest
import torch

from backend_python.engine.timing import LoopPhase, PhaseClock
from tests.unit.test_engine import lm, make_engine, make_seq, run_until_done  # noqa: F401 (lm: fixture)


def serve(lm, overlap: bool, frames: tuple[int, ...], max_slots: int = 4, overlap_min_rows: int = 1):
    engine = make_engine(lm, overlap_steps=overlap, overlap_min_rows=overlap_min_rows, max_slots=max_slots)
    pairs = [make_seq(lm, f"Request number {i}.", frames=n, seed=i) for i, n in enumerate(frames)]
    for seq, _ in pairs:
        engine.add(seq)
    run_until_done(engine, [sink for _, sink in pairs])
    return engine, [sink for _, sink in pairs]


def assert_same_chunks(expected: list, got: list) -> None:
    for a, b in zip(expected, got, strict=True):
        assert a.error is None and b.error is None
        assert [c.chunk_index for c in a.chunks] == [c.chunk_index for c in b.chunks]
        for ca, cb in zip(a.chunks, b.chunks):
            assert ca.context_frames == cb.context_frames
            torch.testing.assert_close(ca.tokens, cb.tokens, rtol=0, atol=0)


def test_overlapped_steps_serve_the_same_chunks_as_plain_steps(lm):
    frames = (3, 12, 7, 1, 9)  # more requests than slots: some join while others finish mid-step
    _, plain = serve(lm, False, frames, max_slots=3)
    _, overlapped = serve(lm, True, frames, max_slots=3)
    assert_same_chunks(plain, overlapped)


def test_steps_that_switch_between_overlapped_and_read_at_once_serve_the_same_chunks(lm):
    """With an overlap minimum of 3 rows the steps of this load go from 1 to 4 rows and back, so the runner passes
    from overlapped to read-at-once (the step in flight read first) and back: the chunks are the plain steps'."""
    frames = (3, 12, 7, 1, 9, 4)
    _, plain = serve(lm, False, frames, max_slots=4)
    engine, mixed = serve(lm, True, frames, max_slots=4, overlap_min_rows=3)
    sizes = engine.phases.drain().step_batch_sizes
    assert any(n < 3 for n in sizes) and any(n >= 3 for n in sizes)  # both kinds of step ran
    assert_same_chunks(plain, mixed)
    assert sorted(engine.scheduler.free_slots) == [0, 1, 2, 3]


def test_a_request_ending_while_the_next_step_runs_gets_no_extra_frame(lm):
    engine, (sink,) = serve(lm, True, (5,))
    assert sum(c.num_new_frames for c in sink.chunks) == 5
    assert sorted(engine.scheduler.free_slots) == [0, 1, 2, 3]


@pytest.mark.parametrize("overlap_min_rows", [1, 2], ids=["overlapped", "below_the_minimum"])
def test_a_steps_codes_are_read_in_the_next_step_when_overlapped_else_in_its_own(lm, overlap_min_rows):
    """Overlapped, the first step only launches: its codes are read, and its chunk sent, during the second. A step
    below the overlap minimum (one row against two) is read in the step that launched it."""
    engine = make_engine(lm, overlap_steps=True, overlap_min_rows=overlap_min_rows)
    seq, sink = make_seq(lm, "Hello.", frames=8)
    engine.add(seq)
    engine._collect(0)
    engine.step()
    overlapped = overlap_min_rows == 1
    assert seq.num_frames == (0 if overlapped else 1) and (engine.runner.pending is not None) == overlapped
    assert not sink.chunks  # the first chunk is two frames: none either way
    engine.step()
    assert seq.num_frames == (1 if overlapped else 2)


def test_the_phase_account_covers_the_loop_and_counts_steps_by_batch_size(lm):
    engine, _ = serve(lm, True, (4, 4))
    totals = engine.phases.drain()
    assert totals.seconds[LoopPhase.DECODE] > 0 and totals.seconds[LoopPhase.PREFILL] > 0
    assert totals.step_batch_sizes[2] >= 4  # both rows ran together for at least their 4 frames
    assert engine.phases.drain().step_batch_sizes == {}  # drained


class FakeClock:
    def __init__(self) -> None:
        self.now = 10.0

    def __call__(self) -> float:
        return self.now


def test_phase_clock_books_the_time_since_the_last_charge():
    clock = FakeClock()
    phases = PhaseClock(clock)
    clock.now += 1.5
    phases.charge(LoopPhase.IDLE)
    clock.now += 0.25
    phases.charge(LoopPhase.DECODE)
    clock.now += 0.25
    phases.charge(LoopPhase.DECODE)
    phases.on_step(3)
    totals = phases.drain()
    assert totals.seconds == {LoopPhase.IDLE: 1.5, LoopPhase.DECODE: 0.5, LoopPhase.PREFILL: 0.0,
                              LoopPhase.HOST: 0.0}
    assert totals.step_batch_sizes == {3: 1}
