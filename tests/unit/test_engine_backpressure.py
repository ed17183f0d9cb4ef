"""Backpressure in the LM's loop (scheduler/flow.py): a request whose emitted audio is the bound ahead of
what its client took is not decoded (it keeps its slot, the others go on) until the client catches up:
by its acks, or by real-time playback for a client that does not ack."""
from __future__ import annotations

import pytest
import torch

from backend_python.engine.engine import EngineConfig, LMEngine
from backend_python.engine.sequence import Sequence
from backend_python.models.base import SamplingParams
from scheduler import AdmissionPolicyName, ChunkingConfig, SchedulerConfig, UnreadBound
from tests.unit.test_engine import ListSink, StepClock, lm  # noqa: F401 (the tiny LM fixture)

FRAME_RATE = 12.5  # the tiny Qwen3-TTS preset's
BOUND_FRAMES = 6


def engine_with_clock(lm, clock) -> LMEngine:
    config = EngineConfig(max_slots=4, max_seq_len=256, codec_left_context_frames=3,
                          scheduler=SchedulerConfig(chunking=ChunkingConfig(first_chunk_frames=2, chunk_frames=2,
                                                                            chunk_growth=None),
                                                    admission_policy=AdmissionPolicyName.PREFILL_FIRST))
    return LMEngine(lm, config, clock=clock)


def add(engine, lm, name: str, frames: int, unread: UnreadBound | None) -> ListSink:
    sink = ListSink()
    engine.add(Sequence(request_id=name, prompt=lm.encode_prompt(name, None), sampling=SamplingParams(),
                        ignore_eos=True, max_frames=frames, sink=sink, generator=torch.Generator().manual_seed(1),
                        unread=unread))
    return sink


def steps(engine, n: int) -> None:
    for _ in range(n):
        engine._collect(0)
        engine.step()


def emitted(sink: ListSink) -> int:
    return sum(chunk.num_new_frames for chunk in sink.chunks)


def test_an_acking_request_pauses_at_the_bound_and_others_go_on(lm):
    clock = StepClock()
    engine = engine_with_clock(lm, clock)
    slow = add(engine, lm, "slow", 40, UnreadBound(BOUND_FRAMES, FRAME_RATE, acks=True))
    free = add(engine, lm, "free", 30, None)
    steps(engine, 40)
    assert emitted(slow) == BOUND_FRAMES  # paused after the chunk that reached the bound
    assert free.done.is_set() and free.error is None and emitted(free) == 30
    assert engine._wait_s() is None  # nothing runnable: the loop sleeps until an update wakes it


def test_an_ack_resumes_a_paused_request_with_the_same_frames_as_unpaused(lm):
    clock = StepClock()
    engine = engine_with_clock(lm, clock)
    paced = add(engine, lm, "same", 20, UnreadBound(BOUND_FRAMES, FRAME_RATE, acks=True))
    steps(engine, 20)
    assert emitted(paced) == BOUND_FRAMES and not paced.done.is_set()
    for taken in range(2, 21, 2):
        engine.set_taken("same", taken)
        steps(engine, 3)
    assert paced.done.is_set() and emitted(paced) == 20

    reference = engine_with_clock(lm, StepClock())
    alone = add(reference, lm, "same", 20, None)
    steps(reference, 30)
    assert torch.equal(torch.cat([c.tokens[c.context_frames:] for c in paced.chunks]),
                       torch.cat([c.tokens[c.context_frames:] for c in alone.chunks]))


def test_a_request_that_does_not_ack_is_paced_by_real_time_playback(lm):
    clock = StepClock()
    engine = engine_with_clock(lm, clock)
    sink = add(engine, lm, "playback", 40, UnreadBound(BOUND_FRAMES, FRAME_RATE, acks=False))
    steps(engine, 30)  # the clock stands still: no audio is played, so it stops at the bound
    assert emitted(sink) == BOUND_FRAMES
    wait = engine._wait_s()
    assert wait is not None and wait > 0  # asleep until playback has used up audio
    clock.now += 4 / FRAME_RATE  # four frames' worth of playback
    steps(engine, 30)
    assert emitted(sink) == BOUND_FRAMES + 4


@pytest.mark.parametrize("acks", [True, False])
def test_a_cancel_ends_a_paused_request_and_frees_its_slot(lm, acks):
    engine = engine_with_clock(lm, StepClock())
    sink = add(engine, lm, "gone", 40, UnreadBound(BOUND_FRAMES, FRAME_RATE, acks=acks))
    steps(engine, 20)
    engine.cancel_id("gone")
    steps(engine, 2)
    assert sink.done.is_set() and len(engine.scheduler.free_slots) == 4


def test_a_stream_paused_on_its_slow_client_holds_no_new_request_back(lm):
    """Deadline-aware admission protects playing streams from a prefill; a stream paused on its client holds the
    bound of audio its client has not taken, so a prefill cannot starve it. Its playback clock ran on meanwhile, and
    read as a stall it kept every new request waiting for the starvation guard (`max_wait_s`)."""
    clock = StepClock()
    config = EngineConfig(max_slots=4, max_seq_len=256, codec_left_context_frames=3,
                          scheduler=SchedulerConfig(chunking=ChunkingConfig(first_chunk_frames=2, chunk_frames=2,
                                                                            chunk_growth=None),
                                                    admission_policy=AdmissionPolicyName.DEADLINE_AWARE,
                                                    max_wait_s=5.0))
    engine = LMEngine(lm, config, clock=clock)
    slow = add(engine, lm, "slow", 40, UnreadBound(BOUND_FRAMES, FRAME_RATE, acks=True))
    steps(engine, 10)
    assert emitted(slow) == BOUND_FRAMES  # paused: its client took nothing
    clock.now = 3.0  # its playback clock says 3 s were played of its 0.48 s
    new = add(engine, lm, "new", 4, None)
    steps(engine, 3)  # the clock stands still: the starvation guard (5 s) never comes
    assert emitted(new) > 0  # admitted at once
