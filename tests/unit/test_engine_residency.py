"""Residency apart from the step: paused streams keep their slot and KV extent but no row, a step runs at most
`max_batch` rows, and a request waits for KV memory (not for a row) when the pool is full."""
from __future__ import annotations

import torch
import pytest

from backend_python.engine.engine import EngineConfig, LMEngine
from backend_python.models.qwen3_tts.lm import Qwen3TTSLM
from backend_python.models.qwen3_tts.presets import preset_config
from scheduler import AdmissionPolicyName, ChunkingConfig, SchedulerConfig, UnreadBound
from tests.unit.test_engine import StepClock, make_seq


@pytest.fixture(scope="module")
def lm() -> Qwen3TTSLM:
    return Qwen3TTSLM.from_config(preset_config("qwen3-tts-tiny"), seed=0)


def engine_with(lm, clock=None, **overrides) -> LMEngine:
    config = EngineConfig(max_slots=16, max_batch=2, max_seq_len=256, codec_left_context_frames=3,
                          scheduler=SchedulerConfig(chunking=ChunkingConfig(first_chunk_frames=1, chunk_frames=2,
                                                                            chunk_growth=None),
                                                    admission_policy=AdmissionPolicyName.PREFILL_FIRST))
    return LMEngine(lm, EngineConfig(**{**config.__dict__, **overrides}), clock=clock or StepClock())


def step(engine: LMEngine, times: int = 1) -> None:
    for _ in range(times):
        engine._collect(0)
        engine.step()


def paced(lm, name: str, frames: int = 100, unread_frames: int = 2):
    """A listener that plays in real time and has heard nothing yet: the stream pauses 2 frames ahead."""
    seq, sink = make_seq(lm, name, frames=frames)
    seq.unread = UnreadBound(max_unread_frames=unread_frames, frame_rate=lm.frame_rate, acks=False)
    return seq, sink


def test_paused_streams_hold_slots_not_rows_and_a_newcomer_starts_at_once(lm):
    """Six streams paused on their listeners (more than a step's two rows) stay live; a new request is admitted
    and speaks within a few steps, as if they were not there."""
    engine = engine_with(lm)
    streams = [paced(lm, f"Paused stream {i}.") for i in range(6)]
    for seq, _ in streams:
        engine.add(seq)
    step(engine, 12)  # the clock stands still: each stream emits 2 frames or more and pauses
    assert all(seq.emitted_frames >= 2 and seq.is_paused(engine._clock()) for seq, _ in streams)
    assert not engine.scheduler.can_decode(streams[0][0], engine._clock())
    newcomer, newcomer_sink = make_seq(lm, "A newcomer.", frames=3)
    engine.add(newcomer)
    step(engine, 3)
    assert newcomer_sink.chunks, "the newcomer waited behind paused streams"
    assert all(seq in engine.scheduler.running for seq, _ in streams)  # still live, holding their slots


def test_a_step_runs_at_most_max_batch_rows(lm):
    engine = engine_with(lm, max_batch=2)
    pairs = [make_seq(lm, f"Request {i}.", frames=4, seed=i) for i in range(5)]
    for seq, _ in pairs:
        engine.add(seq)
    for _ in range(40):
        step(engine)
    sizes = engine.phases.drain().step_batch_sizes
    assert max(sizes) == 2 and all(sink.done.is_set() and sink.error is None for _, sink in pairs)


def test_rows_go_to_the_streams_without_audio_first(lm):
    """Three streams playing and two new ones, two rows: the new ones get them."""
    engine = engine_with(lm, max_batch=2)
    playing = [make_seq(lm, f"Playing {i}.", frames=50, seed=i) for i in range(3)]
    for seq, _ in playing:
        engine.add(seq)
    step(engine, 3)
    assert all(seq.t_first_emitted is not None for seq, _ in playing)
    fresh = [make_seq(lm, f"Fresh {i}.", frames=5, seed=10 + i) for i in range(2)]
    for seq, _ in fresh:
        engine.add(seq)
    before = {seq.request_id: seq.num_frames for seq, _ in playing}
    step(engine)  # admits, launches and (no overlap on the CPU) reads back in one step
    assert all(seq.num_frames == 1 for seq, _ in fresh)
    assert all(seq.num_frames == before[seq.request_id] for seq, _ in playing)


def test_a_request_waits_for_kv_memory_not_a_slot_and_runs_when_it_frees(lm):
    """A pool of one max_seq_len row holds one 150-frame stream: the second waits with slots free, then runs."""
    one_row = lm.kv_positions_for(0, 256) * lm.kv_bytes_per_position() / 2**30
    engine = engine_with(lm, kv_cache_gb=one_row)
    first, first_sink = make_seq(lm, "First of two.", frames=150)
    second, second_sink = make_seq(lm, "Second of two.", frames=150, seed=1)
    engine.add(first)
    engine.add(second)
    step(engine, 2)
    assert first.slot is not None and second.slot is None and engine.scheduler.free_slots
    assert not engine.scheduler.can_admit()  # so the loop sleeps instead of spinning
    occupancy = engine.scheduler.occupancy()
    assert occupancy.num_waiting == 1 and occupancy.kv_blocks_used > 0
    for _ in range(400):
        step(engine)
        if second_sink.done.is_set():
            break
    assert first_sink.error is None and second_sink.error is None
    assert sum(c.num_new_frames for c in second_sink.chunks) == 150
    assert engine.scheduler.occupancy().kv_blocks_used == 0  # every extent given back


def test_pooled_and_static_layouts_give_the_same_tokens(lm):
    from backend_python.engine.config import KVLayout

    def tokens(layout: KVLayout) -> list[torch.Tensor]:
        engine = engine_with(lm, kv_layout=layout, max_batch=4)
        pairs = [make_seq(lm, f"Same tokens {i}.", frames=6, seed=i) for i in range(3)]
        for seq, _ in pairs:
            engine.add(seq)
        step(engine, 30)
        return [torch.cat([c.tokens[c.context_frames:] for c in sink.chunks]) for _, sink in pairs]

    for pooled, static in zip(tokens(KVLayout.POOLED), tokens(KVLayout.STATIC)):
        assert torch.equal(pooled, static)
