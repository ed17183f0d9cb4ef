"""Orpheus backbone: golden against transformers' LlamaForCausalLM on tiny random weights (same
logits, same greedy frames), official-name checkpoint loading both ways, and the frame/EOS rules."""
from __future__ import annotations

import pytest
import torch
from transformers import LlamaForCausalLM, LogitsProcessor, LogitsProcessorList

from backend_python.models.base import DecodeBatch, SamplingParams
from backend_python.models.orpheus import OrpheusLM, preset_config
from backend_python.models.orpheus.tiny import save_checkpoint
from backend_python.models.orpheus.frames import codes_to_tokens, slot_token_base
from backend_python.models.orpheus.tokens import CODES_PER_SLOT, END_OF_SPEECH, FRAME_TOKENS

LOGITS_ATOL = 1e-4  # fp32, CPU; measured 0 (bit-equal) on logits of std ~8, max ~55 (the tied head reads N(0, 1) rows)
TEXTS = ["Get the trust fund to the bank early.", "Hi.", "The quick brown fox jumps over the lazy dog."]


@pytest.fixture(scope="module")
def checkpoint_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("orpheus-tiny")
    save_checkpoint(OrpheusLM.from_config(preset_config("orpheus-tiny"), seed=3), path)
    return path


@pytest.fixture(scope="module")
def repeating_dir(tmp_path_factory):
    """A model that repeats itself: the rows of each audio band are nearly equal, so every frame
    sees nearly the same inputs and greedy decoding emits the same frame again (unless penalised)."""
    path = tmp_path_factory.mktemp("orpheus-repeating")
    lm = OrpheusLM.from_config(preset_config("orpheus-tiny"), seed=4)
    with torch.no_grad():
        for slot in range(FRAME_TOKENS):
            band = lm.backbone.head_weight[slot_token_base(slot):slot_token_base(slot) + CODES_PER_SLOT]
            band.copy_(band.mean(0) + 0.05 * band)
    save_checkpoint(lm, path)
    return path


@pytest.fixture(scope="module")
def ours(checkpoint_dir) -> OrpheusLM:
    return OrpheusLM.from_pretrained(checkpoint_dir)


@pytest.fixture(scope="module")
def reference(checkpoint_dir) -> LlamaForCausalLM:
    return LlamaForCausalLM.from_pretrained(str(checkpoint_dir), dtype=torch.float32).eval()


class FrameSlotMask(LogitsProcessor):
    """The Orpheus frame rule for HF generate: new token i may only be an audio token of slot i % 7."""

    def __init__(self, prompt_len: int) -> None:
        self.prompt_len = prompt_len

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        slot = (input_ids.shape[1] - self.prompt_len) % FRAME_TOKENS
        base = slot_token_base(slot)
        masked = torch.full_like(scores, float("-inf"))
        masked[:, base:base + CODES_PER_SLOT] = scores[:, base:base + CODES_PER_SLOT]
        return masked


def prompt_ids(lm: OrpheusLM, text: str, voice: str | None = None) -> torch.Tensor:
    return lm.encode_prompt(text, voice).tensors["input_ids"]


def our_greedy_frames(lm: OrpheusLM, slots: list[int], num_frames: int, penalty: float) -> torch.Tensor:
    """One prompt per slot (TEXTS), decoded together -> codes [B, T, 7]."""
    lm.allocate_slots(4, 256)
    for slot, text in zip(slots, TEXTS):
        lm.prefill(slot, lm.encode_prompt(text, None))
    params = [SamplingParams(temperature=0.0, repetition_penalty=penalty)] * len(slots)
    batch = DecodeBatch(slots, params, [torch.Generator() for _ in slots], ignore_eos=[True] * len(slots))
    return torch.stack([lm.decode(batch)[0] for _ in range(num_frames)], dim=1)


def test_prompt_is_the_orpheus_format(ours):
    ids = prompt_ids(ours, "Hi.", "leo").tolist()
    text_ids = ours.tokenizer("leo: Hi.")["input_ids"]
    assert text_ids[0] == ours.tokenizer.bos_token_id  # the tokenizer adds <|begin_of_text|>, as Llama-3's does
    assert ids == [128259, *text_ids, 128009, 128260, 128261, 128257]


def test_prefill_logits_match_transformers(ours, reference):
    ids = prompt_ids(ours, TEXTS[0])
    with torch.no_grad():
        expected = reference(ids[None]).logits[0]  # [L, V]
        cache = ours.backbone.allocate_cache(1, ids.shape[0], torch.device("cpu"), torch.float32)
        hidden = ours.backbone.hidden_states(ids[None], torch.tensor([0]), torch.arange(ids.shape[0])[None], cache)
        got = ours.backbone.logits(hidden[0])
    assert expected.abs().max() > 1.0  # a real signal, not zeros
    torch.testing.assert_close(got, expected, rtol=0, atol=LOGITS_ATOL)


def hf_greedy_tokens(reference: LlamaForCausalLM, ids: torch.Tensor, num_frames: int, penalty: float) -> list[int]:
    ids, num_tokens = ids[None], num_frames * FRAME_TOKENS
    out = reference.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=num_tokens,
                             min_new_tokens=num_tokens, repetition_penalty=penalty, pad_token_id=0, eos_token_id=None,
                             logits_processor=LogitsProcessorList([FrameSlotMask(ids.shape[1])]))
    return out[0, ids.shape[1]:].tolist()


@pytest.mark.parametrize("penalty", [1.0, 1.3])
def test_greedy_frames_match_transformers_generate(ours, reference, penalty):
    """Batched slots (out of order, with a gap) against HF greedy generation under the same slot mask."""
    got = our_greedy_frames(ours, [2, 0, 3], 3, penalty)
    for row, text in enumerate(TEXTS):
        assert hf_greedy_tokens(reference, prompt_ids(ours, text), 3, penalty) == codes_to_tokens(got[row]).tolist()
    assert len({tuple(r.flatten().tolist()) for r in got}) == 3  # the prompts really steer the rows


def test_repetition_penalty_matches_transformers_where_it_matters(repeating_dir):
    lm = OrpheusLM.from_pretrained(repeating_dir)
    reference = LlamaForCausalLM.from_pretrained(str(repeating_dir), dtype=torch.float32).eval()
    plain, penalised = our_greedy_frames(lm, [1], 6, 1.0)[0], our_greedy_frames(lm, [1], 6, 1.3)[0]  # [6, 7]
    assert (plain[1:] == plain[:-1]).any()  # without a penalty some slot repeats its code
    assert not (penalised[1:] == penalised[:-1]).any() and not torch.equal(penalised, plain)
    assert hf_greedy_tokens(reference, prompt_ids(lm, TEXTS[0]), 6, 1.3) == codes_to_tokens(penalised).tolist()


def test_transformers_checkpoint_loads_by_its_own_names(reference, ours, tmp_path):
    reference.save_pretrained(str(tmp_path))
    ours.tokenizer.save_pretrained(str(tmp_path))
    loaded = OrpheusLM.from_pretrained(tmp_path)
    expected = ours.backbone.state_dict()
    assert loaded.backbone.state_dict().keys() == expected.keys()
    for name, value in loaded.backbone.state_dict().items():
        assert torch.equal(value, expected[name]), name


def test_codes_are_in_range_and_sampling_is_seeded(ours):
    ours.allocate_slots(2, 64)

    def run(seed: int) -> torch.Tensor:
        ours.prefill(1, ours.encode_prompt(TEXTS[0], "tara"))
        batch = DecodeBatch([1], [SamplingParams()], [torch.Generator().manual_seed(seed)], [True])
        return torch.stack([ours.decode(batch)[0][0] for _ in range(4)])

    first, again, other = run(5), run(5), run(6)
    assert first.shape == (4, FRAME_TOKENS) and first.min() >= 0 and first.max() < CODES_PER_SLOT
    assert torch.equal(first, again) and not torch.equal(first, other)


def test_end_of_speech_at_slot_0_ends_a_row_unless_it_ignores_eos():
    lm = OrpheusLM.from_config(preset_config("orpheus-tiny"), seed=1)
    ids = prompt_ids(lm, TEXTS[0])
    with torch.no_grad():  # point END_OF_SPEECH's head row at the prompt's last hidden state
        cache = lm.backbone.allocate_cache(1, ids.shape[0], torch.device("cpu"), torch.float32)
        hidden = lm.backbone(ids[None], torch.tensor([0]), torch.arange(ids.shape[0])[None], cache)[0]
        lm.backbone.head_weight[END_OF_SPEECH] = 10 * hidden
    lm.allocate_slots(2, 64)
    lm.prefill(0, lm.encode_prompt(TEXTS[0], None))
    lm.prefill(1, lm.encode_prompt(TEXTS[0], None))
    greedy = SamplingParams(temperature=0.0)
    codes, is_eos = lm.decode(DecodeBatch([0, 1], [greedy, greedy], [torch.Generator()] * 2, [False, True]))
    assert is_eos.tolist() == [True, False]
    assert codes.min() >= 0 and codes.max() < CODES_PER_SLOT


def test_unknown_voice_names_the_known_ones(ours):
    with pytest.raises(ValueError, match="tara"):
        ours.encode_prompt("Hi.", "nobody")
    assert prompt_ids(ours, "Hi.", "LEO").tolist() == prompt_ids(ours, "Hi.", "leo").tolist()


def test_slot_full_is_an_error_not_an_overflow(ours):
    ours.allocate_slots(1, 3)  # the engine's length: 3 steps -> 21 positions
    ours.prefill(0, ours.encode_prompt("Hi.", None))
    batch = DecodeBatch([0], [SamplingParams()], [torch.Generator()], [True])
    with pytest.raises(ValueError, match="full"):
        for _ in range(3):
            ours.decode(batch)
