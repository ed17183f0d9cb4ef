"""Batched, right-padded prefill (the CUDA prefill graphs' function) equals prefilling each prompt
alone; the grouping of prompts into (batch, length) buckets."""
from __future__ import annotations

import pytest
import torch

from backend_python.models.graphs.prefill import PrefillGroup, plan_groups
from backend_python.models.qwen3_tts import Qwen3TTSLM, preset_config
from tests.unit.lm_graph_helpers import TEXTS, needs_cuda


def test_groups_take_similar_lengths_and_fit_a_bucket():
    groups, eager = plan_groups([10, 300, 20, 12, 700, 15], batch_sizes=(1, 2, 4), length_buckets=(16, 32, 512),
                                max_tokens=1024)
    assert eager == [4]  # past the largest length bucket: prefilled eagerly
    assert groups == [PrefillGroup((0, 3, 5), 4, 16), PrefillGroup((2,), 1, 32), PrefillGroup((1,), 1, 512)]


def test_a_group_is_never_wider_than_the_token_budget_allows():
    groups, _ = plan_groups([100] * 5, batch_sizes=(1, 2, 4, 8), length_buckets=(128,), max_tokens=256)
    assert [g.indices for g in groups] == [(0, 1), (2, 3), (4,)]
    assert all(g.batch * g.length <= 256 for g in groups)


def test_a_prompt_whose_start_and_bucket_pass_its_row_runs_eagerly():
    groups, eager = plan_groups([1, 1, 20], batch_sizes=(1, 2, 4), length_buckets=(16, 32), starts=[9, 120, 0],
                                max_positions=128)
    assert eager == [1]  # 120 + 16 > 128: a padded row must fit its cache row
    assert groups == [PrefillGroup((0,), 1, 16), PrefillGroup((2,), 1, 32)]


def right_padded_prefill(lm: Qwen3TTSLM, slots: list[int], texts: list[str], length: int) -> None:
    """What a prefill graph computes, run eagerly: the prompts right-padded to `length`, plus a padding row."""
    embeds = [lm._prompt_embeddings(lm.encode_prompt(t, None))[0] for t in texts]
    scratch = lm._memory.scratch_row
    batch = torch.randn(len(texts) + 1, length, lm.config.talker.hidden_size)  # garbage in the padding
    for i, e in enumerate(embeds):
        batch[i, :e.shape[0]] = e
    lm._prefill_rows(batch, torch.tensor(slots + [scratch]), torch.tensor([e.shape[0] - 1 for e in embeds] + [0]),
                     torch.zeros(len(texts) + 1, dtype=torch.int64))


def test_right_padded_batched_prefill_equals_each_prompt_alone():
    lm = Qwen3TTSLM.from_config(preset_config("qwen3-tts-tiny"), seed=0)
    lm.allocate_slots(6, 128)
    slots, texts = [4, 1, 2], TEXTS[:3]
    for slot, text in zip(slots, texts):
        lm.prefill(slot, lm.encode_prompt(text, None))
    mem = lm._memory
    expected = (mem.logits[slots].clone(), mem.hidden[slots].clone(), mem.kv.k[:, slots].clone())
    lengths = [lm.encode_prompt(t, None).num_tokens for t in texts]
    mem.logits.zero_(), mem.hidden.zero_(), mem.kv.k.zero_()
    right_padded_prefill(lm, slots, texts, length=max(lengths) + 7)
    torch.testing.assert_close(mem.logits[slots], expected[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(mem.hidden[slots], expected[1], rtol=1e-5, atol=1e-5)
    for i, n in enumerate(lengths):  # the real positions' keys; the padding's are garbage, never read
        torch.testing.assert_close(mem.kv.k[:, slots[i], :n], expected[2][:, i, :n], rtol=1e-5, atol=1e-5)


@needs_cuda
def test_prefill_graphs_give_the_tokens_of_one_by_one_prefill():
    from tests.unit.test_qwen3_tts_graphs import small_config
    from backend_python.models.base import DecodeBatch, SamplingParams

    def tokens(lm: Qwen3TTSLM, batched: bool) -> torch.Tensor:
        lm.allocate_slots(8, 128)
        slots, prompts = [3, 0, 5, 1], [lm.encode_prompt(t, None) for t in TEXTS]
        if batched:
            lm.prefill_batch(slots, prompts)
        else:
            for slot, prompt in zip(slots, prompts):
                lm.prefill(slot, prompt)
        params = [SamplingParams(temperature=0.0)] * 4
        gens = [torch.Generator(device="cuda").manual_seed(i) for i in range(4)]
        batch = DecodeBatch(slots, params, gens, [True] * 4)
        return torch.stack([lm.decode(batch)[0].cpu() for _ in range(4)], dim=1)

    lm = Qwen3TTSLM.from_config(small_config(), device="cuda", dtype=torch.float32, seed=0)
    eager = tokens(lm, batched=False)
    graphed = tokens(lm, batched=True)
    assert lm._prefill_graphs is not None and lm._prefill_graphs._graphs  # the graphs ran
    assert torch.equal(graphed, eager)
