"""The engine's scheduler (engine/step_scheduler.py) alone: admission into slots and KV extents, the rows of a
decode step, retiring, and the loop's sleep, with the tiny Qwen3-TTS's facts and a memory that records."""
from __future__ import annotations

import pytest
import torch

from backend_python.engine.config import EngineConfig, KVLayout
from backend_python.engine.sequence import Sequence, SeqStatus
from backend_python.engine.step_scheduler import StepScheduler
from backend_python.engine.timing import StepTiming
from backend_python.models.base import SamplingParams
from backend_python.models.qwen3_tts.lm import Qwen3TTSLM
from backend_python.models.qwen3_tts.presets import preset_config
from scheduler import AdmissionPolicyName, ChunkingConfig, SchedulerConfig, UnreadBound


class RecordingMemory:
    """The runner's side of the slots, as calls."""

    def __init__(self) -> None:
        self.placed: list[tuple[int, int, int]] = []
        self.released: list[int] = []

    def place(self, seq: Sequence) -> None:
        self.placed.append((seq.slot, seq.kv_extent.start, seq.kv_extent.num_positions))

    def release(self, slot: int) -> None:
        self.released.append(slot)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def lm() -> Qwen3TTSLM:
    return Qwen3TTSLM.from_config(preset_config("qwen3-tts-tiny"), seed=0)


def make_scheduler(lm, kv_positions: int | None = None, **overrides) -> tuple[StepScheduler, RecordingMemory, Clock]:
    chunking = ChunkingConfig(first_chunk_frames=2, chunk_frames=5, chunk_growth=None)
    config = EngineConfig(**{"max_slots": 4, "max_seq_len": 256, "kv_block_size": 16,
                             "kv_layout": KVLayout.STATIC if kv_positions is None else KVLayout.POOLED,
                             "scheduler": SchedulerConfig(chunking=chunking,
                                                          admission_policy=AdmissionPolicyName.PREFILL_FIRST),
                             **overrides})
    memory, clock = RecordingMemory(), Clock()
    return StepScheduler(config, lm, memory, StepTiming(), clock, kv_positions), memory, clock


def make_seq(lm, name: str, frames: int = 10) -> Sequence:
    return Sequence(request_id=name, prompt=lm.encode_prompt(f"{name}.", None), sampling=SamplingParams(),
                    ignore_eos=True, max_frames=frames, sink=None, generator=torch.Generator())


def test_admission_takes_free_slots_in_arrival_order_and_the_rest_wait(lm):
    scheduler, memory, _ = make_scheduler(lm, max_slots=2)
    seqs = [make_seq(lm, f"r{i}") for i in range(3)]
    scheduler.waiting.extend(seqs)
    admission = scheduler.admit()
    assert admission.ready == seqs[:2] and not admission.refused
    assert scheduler.waiting == seqs[2:] and scheduler.free_slots == []
    assert {seq.slot for seq in seqs[:2]} == {0, 1} and seqs[2].slot is None
    assert all(seq.first_chunk_frames == 2 and seq.chunk_frames == 5 for seq in seqs[:2])  # a plan each
    assert memory.placed == []  # static rows: no extent to place
    assert not scheduler.running  # running once prefilled
    scheduler.start(admission.ready)
    assert scheduler.running == seqs[:2] and all(seq.status is SeqStatus.RUNNING for seq in seqs[:2])


def test_a_request_too_long_is_refused_at_once_and_the_next_admitted(lm):
    scheduler, _, _ = make_scheduler(lm, max_seq_len=64)
    big, ok = make_seq(lm, "big", frames=100), make_seq(lm, "ok", frames=3)
    scheduler.waiting.extend([big, ok])
    admission = scheduler.admit()
    assert [seq for seq, _ in admission.refused] == [big] and "max_seq_len" in admission.refused[0][1]
    assert admission.ready == [ok] and scheduler.waiting == [] and big.slot is None


def blocks(num_positions: int) -> int:
    return -(-num_positions // 16)


def test_a_pool_too_full_for_the_first_holds_back_those_behind_it(lm):
    first, second, small = make_seq(lm, "a"), make_seq(lm, "b"), make_seq(lm, "c", frames=1)
    need = lambda seq: blocks(lm.kv_positions_for(seq.prompt.num_tokens, seq.max_frames))
    scheduler, memory, _ = make_scheduler(lm, kv_positions=16 * (need(first) + need(small)))
    scheduler.waiting.extend([first, second, small])
    assert scheduler.admit().ready == [first]
    assert memory.placed == [(first.slot, first.kv_extent.start, first.kv_extent.num_positions)]
    assert scheduler.waiting == [second, small]  # FIFO: the small one, which fits, does not overtake
    assert not scheduler.can_admit() and scheduler.occupancy().kv_blocks_free == need(small)
    scheduler.start([first])
    first.status = SeqStatus.FINISHED
    scheduler.retire()
    assert memory.released == [first.slot] and first.kv_extent is None
    assert scheduler.can_admit() and scheduler.occupancy().kv_blocks_used == 0


def test_decode_rows_skip_paused_streams_and_pace_to_max_batch(lm):
    scheduler, _, clock = make_scheduler(lm, max_batch=2)
    seqs = [make_seq(lm, f"r{i}") for i in range(4)]
    scheduler.waiting.extend(seqs)
    scheduler.start(scheduler.admit().ready)
    for i, seq in enumerate(seqs):
        seq.arrival_time = float(i)
    paused = seqs[0]
    paused.unread, paused.emitted_frames, paused.t_first_emitted = UnreadBound(12, lm.frame_rate, acks=False), 50, clock.now
    assert not scheduler.can_decode(paused, clock.now)
    seqs[1].t_first_emitted, seqs[1].emitted_frames = clock.now, 10  # audio buffered ahead: it yields
    assert scheduler.decode_rows() == [seqs[2], seqs[3]]  # no audio yet goes first, in running order
    del scheduler.running[2:]
    assert scheduler.decode_rows() == [seqs[1]]  # rows to spare: all but the paused one


def test_the_loop_sleeps_only_with_nothing_to_do(lm):
    scheduler, _, clock = make_scheduler(lm)
    assert scheduler.wait_s() is None
    seq = make_seq(lm, "r")
    scheduler.waiting.append(seq)
    assert scheduler.wait_s() == 0.0  # one to admit
    scheduler.start(scheduler.admit().ready)
    assert scheduler.wait_s() == 0.0  # one to decode
    seq.unread, seq.emitted_frames, seq.t_first_emitted = UnreadBound(12, lm.frame_rate, acks=False), 50, clock.now
    wait = scheduler.wait_s()  # paused on a playback-paced listener: until it may go on
    assert wait is not None and wait > 0 and wait == pytest.approx(seq.resumes_at() - clock.now)


def test_reset_frees_every_slot_and_forgets_every_request(lm):
    scheduler, memory, _ = make_scheduler(lm, max_slots=2)
    seqs = [make_seq(lm, f"r{i}") for i in range(3)]
    scheduler.waiting.extend(seqs)
    scheduler.start(scheduler.admit().ready)
    scheduler.reset()
    assert scheduler.live == [] and sorted(memory.released) == [0, 1] and sorted(scheduler.free_slots) == [0, 1]
