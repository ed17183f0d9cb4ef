"""The engine's model runner (engine/model_runner.py) alone on the tiny Qwen3-TTS: its slot memory, a prefill
that fails only the bad prompt, and the decode step read at once or one step late (overlapped)."""
from __future__ import annotations

import pytest
import torch

from backend_python.engine import kv_memory
from backend_python.engine.config import EngineConfig, KVLayout
from backend_python.engine.model_runner import ModelRunner
from backend_python.engine.sequence import Sequence
from backend_python.engine.timing import LoopPhase, PhaseClock, StepTiming
from backend_python.models.base import SamplingParams
from backend_python.models.prompt_cache import PromptCache
from backend_python.models.qwen3_tts.lm import Qwen3TTSLM
from backend_python.models.qwen3_tts.presets import preset_config
from backend_python.models.qwen3_tts.prompt import num_prefix_positions


class FailingPrefill:
    """The tiny LM, whose prefill fails any batch that holds the prompt of `bad_text`."""

    def __init__(self, lm: Qwen3TTSLM, bad_text: str) -> None:
        self._lm, self.bad = lm, lm.encode_prompt(bad_text, None)
        self.batches: list[list[int]] = []

    def prefill_batch(self, slots, prompts) -> int:
        self.batches.append(list(slots))
        if any(prompt is self.bad for prompt in prompts):
            raise ValueError("a bad prompt")
        return self._lm.prefill_batch(slots, prompts)

    def __getattr__(self, name):
        return getattr(self._lm, name)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 0.01  # every reading 10 ms on: each timed call takes some
        return self.now


@pytest.fixture(scope="module")
def lm() -> Qwen3TTSLM:
    return Qwen3TTSLM.from_config(preset_config("qwen3-tts-tiny"), seed=0)


def make_runner(model, **overrides) -> tuple[ModelRunner, PhaseClock, StepTiming]:
    clock = Clock()
    phases, timing = PhaseClock(clock), StepTiming()
    config = EngineConfig(**{"max_slots": 4, "max_seq_len": 256, "kv_layout": KVLayout.STATIC, **overrides})
    return ModelRunner(model, config, phases, timing, clock), phases, timing


def make_seq(lm, text: str, slot: int, seed: int = 0) -> Sequence:
    return Sequence(request_id=text, prompt=lm.encode_prompt(text, None), sampling=SamplingParams(),
                    ignore_eos=True, max_frames=10, sink=None, generator=torch.Generator().manual_seed(seed),
                    slot=slot)


def test_static_rows_have_no_pool_and_a_pooled_cache_one_sized_from_memory(lm):
    assert make_runner(lm)[0].kv_positions is None
    runner = make_runner(lm, kv_layout=KVLayout.POOLED, kv_cache_gb=0.001)[0]
    config = EngineConfig(max_slots=4, max_seq_len=256, kv_cache_gb=0.001)
    assert runner.kv_positions and runner.kv_positions == kv_memory.pool_positions(lm, config)


def test_a_failed_batched_prefill_tries_each_alone_and_fails_the_bad_one_only(lm):
    model = FailingPrefill(lm, "Bad.")
    runner, phases, timing = make_runner(model)
    good, bad, other = make_seq(lm, "Good.", 0), make_seq(lm, "Bad.", 1), make_seq(lm, "Other.", 2)
    bad.prompt = model.bad
    outcome = runner.prefill([good, bad, other])
    assert model.batches == [[0, 1, 2], [0], [1], [2]]
    assert outcome.done == [good, other] and [seq for seq, _ in outcome.failed] == [bad]
    assert str(outcome.failed[0][1]) == "a bad prompt"
    assert timing.prefill_s(10) > 0 and phases.drain().seconds[LoopPhase.PREFILL] > 0


def test_the_prefill_timing_counts_the_positions_a_hit_ran_not_its_cached_prefix():
    """A hit runs only its positions after the cached prefix; on the test's clock each prefill takes as long, so the
    hit's positions cost what the whole prompt's did."""
    cached = Qwen3TTSLM.from_config(preset_config("qwen3-tts-tiny"), seed=0)
    cached.prompt_cache = PromptCache(1 << 20)
    hit_runner, _, hit_timing = make_runner(cached)
    miss_runner, _, miss_timing = make_runner(Qwen3TTSLM.from_config(preset_config("qwen3-tts-tiny"), seed=0))
    first, hit, miss = (make_seq(cached, text, slot) for text, slot in
                        (("A first text.", 0), ("Another text.", 1), ("Another text.", 1)))
    assert cached.prefill_batch([0], [first.prompt]) == first.prompt.num_tokens  # a miss keeps the voice's prefix
    assert hit_runner.prefill([hit]).done == [hit] and miss_runner.prefill([miss]).done == [miss]
    num_run = hit.prompt.num_tokens - num_prefix_positions(cached.config, hit.prompt)
    assert cached.prompt_cache.stats().hits == 1 and cached.prefill_batch([2], [hit.prompt]) == num_run
    assert hit_timing.prefill_s(num_run) == pytest.approx(miss_timing.prefill_s(hit.prompt.num_tokens))


def test_the_decode_step_is_read_at_once_unless_overlapped(lm):
    for is_overlapped in (False, True):
        runner, phases, timing = make_runner(lm, overlap_steps=is_overlapped, overlap_min_rows=1)
        rows = [make_seq(lm, "One.", 0, seed=1), make_seq(lm, "Two.", 1, seed=2)]
        assert runner.prefill(rows).done == rows
        first = runner.launch(rows)
        assert [seq.segment.num_launched for seq in rows] == [1, 1]
        done = runner.in_flight(first)
        assert done == ([] if is_overlapped else [first])
        if is_overlapped:
            assert runner.pending is first and runner.in_flight(runner.launch(rows)) == [first]
        codes, is_eos = runner.read(first)
        assert codes.shape == (2, lm.num_codebooks) and is_eos.shape == (2,)
        assert timing.step_s > 0 and phases.drain().step_batch_sizes[2] == (2 if is_overlapped else 1)


def test_a_step_of_fewer_rows_than_the_overlap_minimum_is_read_at_once_after_the_one_in_flight(lm):
    runner, _, _ = make_runner(lm, overlap_steps=True, overlap_min_rows=2)
    rows = [make_seq(lm, "One.", 0, seed=1), make_seq(lm, "Two.", 1, seed=2)]
    runner.prefill(rows)
    both = runner.launch(rows)
    assert runner.in_flight(both) == [] and runner.pending is both  # two rows: overlapped
    alone = runner.launch(rows[:1])
    assert runner.in_flight(alone) == [both, alone] and runner.pending is None  # one row: read now, in order
    again = runner.launch(rows[:1])
    assert runner.in_flight(again) == [again]  # nothing in flight: this one alone
    assert runner.in_flight(None) == []
    for step in (both, alone, again):
        runner.read(step)


def test_both_modes_decode_the_same_codes(lm):
    codes = []
    for is_overlapped in (False, True):
        runner, _, _ = make_runner(lm, overlap_steps=is_overlapped)
        rows = [make_seq(lm, "Same.", 0, seed=5)]
        runner.prefill(rows)
        steps = [runner.launch(rows) for _ in range(3)]
        codes.append(torch.stack([runner.read(step)[0] for step in steps]))
    torch.testing.assert_close(codes[0], codes[1], rtol=0, atol=0)


def test_a_failed_decode_raises_to_the_engine(lm):
    runner, phases, _ = make_runner(lm)
    with pytest.raises(Exception):
        runner.launch([make_seq(lm, "Never prefilled.", 99)])  # no such slot
    assert phases.drain().step_batch_sizes[1] == 1  # the attempt is still a step of one row
