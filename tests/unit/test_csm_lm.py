"""CsmLM against transformers' CsmForConditionalGeneration on the tiny random checkpoint (golden:
the same checkpoint file loaded by both), plus the CSM-specific rules: invalid ids masked, an
all-zero frame ends the audio, rows of a batch independent, official config and parameter names.

Measured on the CPU (fp32): backbone logits max |diff| 8e-7 (prompts of 8 and 65 tokens, logits
up to ~4), depth-decoder logits identical (0); greedy frames identical. LOGITS_ATOL leaves ~10x headroom.
"""
from __future__ import annotations

import json

import pytest
import torch

from backend_python.models.base import DecodeBatch, SamplingParams
from backend_python.models.csm import CsmConfig, CsmLM, preset_config
from backend_python.models.csm.layers import inv_frequencies
from backend_python.models.csm.presets import LLAMA3_ROPE, TINY_CODEBOOK_SIZE
from backend_python.models.csm.tiny import build_tiny_checkpoint

LOGITS_ATOL = 1e-5
TEXT = "Get the trust fund to the bank early."
GREEDY = SamplingParams(temperature=0.0, repetition_penalty=1.0)
NOT_AUDIO = list(range(TINY_CODEBOOK_SIZE, TINY_CODEBOOK_SIZE + 3))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return build_tiny_checkpoint(tmp_path_factory.mktemp("csm-tiny"), seed=0)


@pytest.fixture(scope="module")
def reference(checkpoint):
    from transformers import CsmForConditionalGeneration
    from transformers.utils import logging

    logging.set_verbosity_error()
    model, info = CsmForConditionalGeneration.from_pretrained(str(checkpoint), output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info  # official names, all of them
    return model.eval()


@pytest.fixture
def lm(checkpoint):
    model = CsmLM.from_pretrained(checkpoint)
    model.allocate_slots(num_slots=4, max_seq_len=256)
    return model


def decode(lm, slots, sampling, generators=None, ignore_eos=None):
    generators = generators or [torch.Generator().manual_seed(0) for _ in slots]
    return lm.decode(DecodeBatch(slots, [sampling] * len(slots), generators, ignore_eos or [False] * len(slots)))


def test_backbone_logits_match_transformers(lm, reference):
    prompt = lm.encode_prompt(TEXT, "1")
    lm.prefill(2, prompt)
    with torch.no_grad():
        expected = reference(input_ids=prompt.tensors["text_ids"][None]).logits[0, -1]
    torch.testing.assert_close(lm._memory.logits[2], expected, rtol=0, atol=LOGITS_ATOL)


def test_depth_decoder_logits_match_transformers(lm, reference):
    """Teacher-forced: one frame's codes in, the logits of codebooks 1..31 out, from the same hidden state."""
    gen = torch.Generator().manual_seed(3)
    hidden = torch.randn(1, lm.config.backbone.hidden_size, generator=gen)
    codes = torch.randint(0, TINY_CODEBOOK_SIZE, (1, lm.num_codebooks), generator=gen)
    dd = lm.depth_decoder
    embeds = torch.cat((hidden[:, None], torch.stack([dd.embed(codes[:, k], k) for k in range(31)], dim=1)), dim=1)
    cache = dd.allocate_cache(1, torch.device("cpu"), torch.float32)
    with torch.no_grad():
        states = dd.model(dd.model.inputs_embeds_projector(embeds), dd.frame_step(1, cache, hidden.device,
                                                                                    hidden.dtype), cache)
        ours = torch.stack([dd.codebooks_head(states[:, k], k) for k in range(1, 32)], dim=1)
        ids = torch.cat((torch.zeros(1, 1, dtype=torch.long), codes[:, :31]), dim=1)  # position 0: the hidden state
        expected = reference.depth_decoder(input_ids=ids, backbone_last_hidden_state=hidden).logits
    torch.testing.assert_close(ours, expected, rtol=0, atol=LOGITS_ATOL)


def reference_frames(reference, prompt, num_frames: int) -> torch.Tensor:
    ids = prompt.tensors["text_ids"][None]
    with torch.no_grad():
        return reference.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=num_frames,
                                  do_sample=False, depth_decoder_do_sample=False, suppress_tokens=NOT_AUDIO,
                                  depth_decoder_suppress_tokens=NOT_AUDIO)[0]  # [frames, 32]


def test_greedy_frames_match_transformers_in_a_batch(lm, reference):
    prompts = [lm.encode_prompt(TEXT, "0"), lm.encode_prompt("Hello world, this is a test.", "1")]
    for slot, prompt in zip((3, 1), prompts):
        lm.prefill(slot, prompt)
    frames = torch.stack([decode(lm, [3, 1], GREEDY)[0] for _ in range(8)], dim=1)  # [2, 8, 32]
    for row, prompt in enumerate(prompts):
        torch.testing.assert_close(frames[row], reference_frames(reference, prompt, 8), rtol=0, atol=0)


def test_codes_never_leave_the_codebook(lm):
    """At temperature 10 the 3 non-audio ids would be drawn ~30 times in 640 draws unless masked."""
    lm.prefill(0, lm.encode_prompt(TEXT, None))
    hot = SamplingParams(temperature=10.0, top_k=0, repetition_penalty=1.0)
    codes = torch.stack([decode(lm, [0], hot)[0] for _ in range(20)])
    assert codes.max() < TINY_CODEBOOK_SIZE and codes.min() >= 0


def test_all_zero_frame_ends_the_audio_unless_ignored(lm):
    with torch.no_grad():  # every logit equal: greedy picks code 0 in every codebook
        lm.lm_head.weight.zero_()
        lm.depth_decoder.codebooks_head.weight.zero_()
    for slot in (0, 1):
        lm.prefill(slot, lm.encode_prompt(TEXT, None))
    codes, is_eos = decode(lm, [0, 1], GREEDY, ignore_eos=[False, True])
    assert codes.eq(0).all() and is_eos.tolist() == [True, False]


def test_rows_do_not_depend_on_batch_neighbours(lm):
    sampling = SamplingParams(temperature=0.9)
    lm.prefill(0, lm.encode_prompt(TEXT, None))
    alone = [decode(lm, [0], sampling, [torch.Generator().manual_seed(7)])[0] for _ in range(1)]
    lm.prefill(0, lm.encode_prompt(TEXT, None))
    lm.prefill(1, lm.encode_prompt("Something else entirely.", "1"))
    gens = [torch.Generator().manual_seed(7), torch.Generator().manual_seed(8)]
    together = decode(lm, [0, 1], sampling, gens)[0]
    torch.testing.assert_close(together[0], alone[0][0], rtol=0, atol=0)


def test_prompt_is_speaker_prefixed_text_with_bos_and_eos(lm):
    ids = lm.encode_prompt("Hi there.", "1").tensors["text_ids"]
    assert lm.tokenizer.decode(ids) == "<|begin_of_text|>[1]Hi there.<|end_of_text|>"
    with pytest.raises(ValueError, match=r"unknown voice 'nobody'.*'0', '1'"):
        lm.encode_prompt("Hi.", "nobody")


def test_config_round_trips_and_csm_1b_is_transformers_default():
    from transformers import CsmConfig as ReferenceConfig
    from transformers.utils import logging

    logging.set_verbosity_error()
    tiny = preset_config("csm-tiny")
    assert CsmConfig.from_dict(tiny.to_dict()) == tiny
    full = preset_config("csm-1b")
    # save_pretrained writes only what differs from the defaults: both forms must mean CSM-1B
    for official in (ReferenceConfig().to_dict(), json.loads(ReferenceConfig().to_json_string(use_diff=True))):
        ours = CsmConfig.from_dict(official)
        assert (ours.backbone, ours.depth_decoder, ours.vocab_size) == (full.backbone, full.depth_decoder,
                                                                       full.vocab_size)
        assert (ours.codebook_size, ours.frame_rate) == (2048, 12.5)


def test_llama3_rope_frequencies_match_transformers():
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = LlamaConfig(hidden_size=512, num_attention_heads=4, rope_parameters={
        "rope_type": "llama3", "rope_theta": LLAMA3_ROPE.rope_theta, "factor": LLAMA3_ROPE.factor,
        "low_freq_factor": LLAMA3_ROPE.low_freq_factor, "high_freq_factor": LLAMA3_ROPE.high_freq_factor,
        "original_max_position_embeddings": LLAMA3_ROPE.original_max_position_embeddings})
    expected, _ = ROPE_INIT_FUNCTIONS["llama3"](config, "cpu")
    ours = inv_frequencies(128, LLAMA3_ROPE, torch.device("cpu"))
    torch.testing.assert_close(ours, expected, rtol=1e-6, atol=0)
    assert not torch.equal(ours, inv_frequencies(128, preset_config("csm-1b").backbone.rope, torch.device("cpu")))


def test_loads_a_checkpoint_saved_by_transformers(tmp_path, reference):
    """The other direction: transformers' own save_pretrained (diff-only config.json, its tied-weight
    convention) loads through our loader and gives the same logits and codec."""
    from backend_python.models.csm.checkpoint import read_config
    from backend_python.models.csm.codec import MimiCodec

    with torch.no_grad():  # make this copy differ from the tiny checkpoint, so nothing is read from there
        reference.lm_head.weight.mul_(-1.0)
    reference.save_pretrained(str(tmp_path))
    CsmLM.from_config(preset_config("csm-tiny")).tokenizer.save_pretrained(str(tmp_path))
    ours = CsmLM.from_pretrained(tmp_path)
    ours.allocate_slots(1, 64)
    prompt = ours.encode_prompt(TEXT, "0")
    ours.prefill(0, prompt)
    with torch.no_grad():
        expected = reference(input_ids=prompt.tensors["text_ids"][None]).logits[0, -1]
        reference.lm_head.weight.mul_(-1.0)
    torch.testing.assert_close(ours._memory.logits[0], expected, rtol=0, atol=LOGITS_ATOL)
    codec = MimiCodec.from_pretrained(tmp_path, read_config(tmp_path).codec)
    codes = torch.randint(0, TINY_CODEBOOK_SIZE, (1, 4, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        audio = reference.codec_model.decode(codes.transpose(1, 2)).audio_values[:, 0]
    torch.testing.assert_close(codec.decode(codes), audio.clamp(-1, 1), rtol=0, atol=1e-6)


def test_registry_resolves_the_presets_and_a_checkpoint_dir(checkpoint):
    from backend_python.models import registry

    assert registry.resolve("csm-1b") == registry.ModelSpec("csm-1b", "csm", preset="csm-1b")
    spec = registry.resolve(str(checkpoint))
    assert (spec.family, spec.checkpoint) == ("csm", checkpoint)
    assert registry.family_of(spec).codec_left_context_frames(spec) == 8
