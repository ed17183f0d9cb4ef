"""CosyVoice 3's LM: the prompt as the reference lays it out, golden against transformers' Qwen2 (the same hidden
states, the same greedy tokens as one plain full forward), batched slots against single ones, seeds, end of
speech (blocked, forced, ignored), voices and references, our checkpoint and the official directory layout, the
real preset's size, and the multi-token-prediction hook (frames_per_step 2)."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from transformers import Qwen2Config as HFQwen2Config
from transformers import Qwen2ForCausalLM, Qwen2TokenizerFast

from backend_python.models.base import DecodeBatch, SamplingParams, VoiceReference
from backend_python.models.checkpoint_io import TINY_BPE_SENTENCES, train_byte_level_bpe
from backend_python.models.cosyvoice3 import description, family
from backend_python.models.cosyvoice3.checkpoint import OFFICIAL_TEXT_LM_DIR
from backend_python.models.cosyvoice3.lm import CosyVoice3LM, random_voices
from backend_python.models.cosyvoice3.presets import cosyvoice3_0_5b, preset_config
from backend_python.models.cosyvoice3.prompt import INSTRUCT_PREFIX, SPEAKER_EMBEDDING, TEXT_IDS
from backend_python.models.cosyvoice3.tiny import save_checkpoint
from backend_python.models.registry import ModelSpec
from tests.unit.lm_graph_helpers import (assert_close, assert_graph_replay_equals_eager, assert_padded_equals_eager,
                                        needs_cuda, sampling_mixes)

torch.set_flush_denormal(True)

ATOL = 1e-4  # fp32, CPU
TEXTS = ["Get the trust fund to the bank early.", "Hi.", "The quick brown fox jumps over the lazy dog."]
NUM_CODES, SOS, EOS, TASK_ID = 6561, 6561, 6562, 6563
GREEDY = SamplingParams(temperature=0.0, repetition_penalty=1.0)
SAMPLED = SamplingParams(temperature=1.0, top_k=25, top_p=0.8, repetition_penalty=1.1)  # the reference's top-k/p


@pytest.fixture(scope="module")
def lm() -> CosyVoice3LM:
    return CosyVoice3LM.from_config(preset_config("cosyvoice3-tiny"), seed=3)


@pytest.fixture(scope="module")
def reference(lm) -> Qwen2ForCausalLM:
    """transformers' Qwen2 holding our backbone's weights (`llm.model.*` are its names)."""
    hf = Qwen2ForCausalLM(HFQwen2Config(**lm.config.llm.to_dict())).eval()
    state = {k.removeprefix("llm.model."): v for k, v in lm.state_dict().items() if k.startswith("llm.model.")}
    missing, unexpected = hf.load_state_dict(state, strict=False)
    assert set(missing) <= {"lm_head.weight"} and not unexpected
    return hf


def reference_embeddings(lm: CosyVoice3LM, text: str, speech: list[int] = ()) -> torch.Tensor:
    """The reference's lm_input for CosyVoice 3 (cross-lingual): [speech_embedding[sos], embed_tokens(instruct +
    text), speech_embedding[task_id]], then the speech tokens fed back -> [L, H]."""
    ids = torch.tensor(lm.tokenizer(INSTRUCT_PREFIX + text)["input_ids"])
    speech = lm.speech_embedding(torch.tensor(speech, dtype=torch.long))
    return torch.cat((lm.speech_embedding.weight[SOS][None], lm.llm.model.model.embed_tokens(ids),
                      lm.speech_embedding.weight[TASK_ID][None], speech))


def reference_logits(lm: CosyVoice3LM, reference: Qwen2ForCausalLM, embeds: torch.Tensor) -> torch.Tensor:
    """One plain full forward (no cache) -> llm_decoder logits of every position [L, 6761]."""
    out = reference(inputs_embeds=embeds[None], output_hidden_states=True)
    return lm.llm_decoder(out.hidden_states[-1][0])


def decode(lm: CosyVoice3LM, slots: list[int], texts: list[str], params: list[SamplingParams], seeds: list[int],
           num_steps: int, ignore_eos: bool = True) -> torch.Tensor:
    """Fresh slots, one prompt each, decoded together -> codes [B, num_steps]."""
    lm.allocate_slots(4, 256)
    for slot, text in zip(slots, texts):
        lm.prefill(slot, lm.encode_prompt(text, None))
    batch = DecodeBatch(slots, params, [torch.Generator().manual_seed(s) for s in seeds], [ignore_eos] * len(slots))
    return torch.stack([lm.decode(batch)[0][:, 0] for _ in range(num_steps)], dim=1)


# ---- the prompt ------------------------------------------------------------------------------------
def test_prompt_is_sos_instruct_text_task_id(lm):
    prompt = lm.encode_prompt("Hi.", None)
    ids = lm.tokenizer(INSTRUCT_PREFIX + "Hi.")["input_ids"]
    assert prompt.tensors[TEXT_IDS].tolist() == ids and prompt.num_tokens == len(ids) + 2
    assert lm.tokenizer.convert_tokens_to_ids("<|endofprompt|>") in ids  # one token, as the reference asserts
    with torch.no_grad():
        torch.testing.assert_close(lm.prompt_embeddings(prompt), reference_embeddings(lm, "Hi."), rtol=0, atol=0)
    own = "You are a helpful assistant. Please say a sentence in a very soft voice.<|endofprompt|>Hi."
    assert lm.encode_prompt(own, None).tensors[TEXT_IDS].tolist() == lm.tokenizer(own)["input_ids"]  # kept as is
    assert (lm.config.sos, lm.config.eos, lm.config.task_id, lm.config.fill) == (6561, 6562, 6563, 6564)


def test_prefill_matches_transformers_qwen2(lm, reference):
    prompt = lm.encode_prompt(TEXTS[0], None)
    lm.allocate_slots(2, 128)
    lm.prefill(1, prompt)
    with torch.no_grad():
        expected = reference_logits(lm, reference, reference_embeddings(lm, TEXTS[0]))[-1]
        got = lm.llm_decoder(lm._memory.hidden[1])
    assert expected.abs().max() > 1.0  # a real signal, not zeros
    assert lm.llm.model.model.layers[0].self_attn.q_proj.bias.abs().max() > 0  # the biases count
    torch.testing.assert_close(got, expected, rtol=0, atol=ATOL)


def test_prefill_and_decode_equal_one_full_forward(lm, reference):
    """KV cache: greedy tokens decoded step by step are the argmax over the codes of one uncached forward."""
    tokens = decode(lm, [2], [TEXTS[0]], [GREEDY], [0], num_steps=6)[0].tolist()
    with torch.no_grad():
        logits = reference_logits(lm, reference, reference_embeddings(lm, TEXTS[0], tokens[:-1]))
    expected = logits[-len(tokens):, :NUM_CODES].argmax(dim=-1).tolist()
    assert tokens == expected and len(set(tokens)) > 1


# ---- batching and seeds ----------------------------------------------------------------------------
def test_batched_slots_equal_each_alone(lm):
    slots, seeds, params = [3, 0, 2], [7, 8, 9], [SAMPLED, GREEDY, SAMPLED]
    together = decode(lm, slots, TEXTS, params, seeds, num_steps=5)
    alone = [decode(lm, [slot], [text], [p], [seed], num_steps=5)[0]
             for slot, text, p, seed in zip(slots, TEXTS, params, seeds)]
    assert torch.equal(together, torch.stack(alone))
    assert len({tuple(row.tolist()) for row in together}) == 3


def test_same_seed_same_tokens(lm):
    first, again = (decode(lm, [1], [TEXTS[0]], [SAMPLED], [5], num_steps=8) for _ in range(2))
    other = decode(lm, [1], [TEXTS[0]], [SAMPLED], [6], num_steps=8)
    assert torch.equal(first, again) and not torch.equal(first, other)
    assert 0 <= first.min() and first.max() < NUM_CODES


@pytest.mark.parametrize("mix", ["greedy", "sampled", "mixed"])
def test_padded_graph_bucket_equals_unpadded_eager_on_cpu(mix):
    """The CUDA-graph path's eager twin (padding rows on the scratch row, the whole cache) is the CPU step."""
    lm = CosyVoice3LM.from_config(preset_config("cosyvoice3-tiny"), seed=1)
    assert_padded_equals_eager(lm, sampling_mixes(GREEDY, SAMPLED)[mix][:3], num_frames=4, max_seq_len=128)


# ---- end of speech ---------------------------------------------------------------------------------
def constant_model(eos_logit: float, **ratios: float) -> CosyVoice3LM:
    """A model whose every step sees the same hidden state (layers add nothing, all speech rows equal), with its
    end-of-speech logit set to eos_logit times the codes' largest."""
    lm = CosyVoice3LM.from_config(replace(preset_config("cosyvoice3-tiny"), **ratios), seed=2)
    with torch.no_grad():
        for layer in lm.llm.model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        lm.speech_embedding.weight[:] = lm.speech_embedding.weight[0].clone()
        hidden = lm.llm.model.model.norm(lm.speech_embedding.weight[0])
        top = (lm.llm_decoder.weight[:NUM_CODES] @ hidden).max()
        lm.llm_decoder.weight[EOS] = hidden * (eos_logit * top / hidden.dot(hidden))
    return lm


def eos_steps(lm: CosyVoice3LM, num_steps: int) -> list[list[bool]]:
    """Rows [ignore_eos False, ignore_eos True] on the same text -> is_eos per step."""
    lm.allocate_slots(2, 512)
    for slot in (0, 1):
        lm.prefill(slot, lm.encode_prompt("Hi.", None))
    batch = DecodeBatch([0, 1], [GREEDY, GREEDY], [torch.Generator()] * 2, [False, True])
    return [lm.decode(batch)[1].tolist() for _ in range(num_steps)]


def test_end_of_speech_is_blocked_below_the_minimum_then_ends_a_row_unless_it_ignores_eos():
    lm = constant_model(eos_logit=2.0, min_token_text_ratio=1.0, max_token_text_ratio=4.0)
    min_frames = len(lm.encode_prompt("Hi.", None).tensors[TEXT_IDS])  # 1 token per text token
    steps = eos_steps(lm, min_frames + 1)
    assert steps[:min_frames] == [[False, False]] * min_frames and steps[min_frames] == [True, False]


def test_end_of_speech_is_forced_at_the_maximum_unless_ignored():
    lm = constant_model(eos_logit=-2.0, min_token_text_ratio=0.0, max_token_text_ratio=2.0)
    max_frames = 2 * len(lm.encode_prompt("Hi.", None).tensors[TEXT_IDS])
    steps = eos_steps(lm, max_frames + 1)
    assert steps[:max_frames] == [[False, False]] * max_frames and steps[max_frames] == [True, False]


# ---- voices and references -------------------------------------------------------------------------
def test_a_voice_picks_the_codec_s_speaker_embedding_not_the_lm_prompt(lm):
    alice, bob = lm.encode_prompt("Hi.", "alice"), lm.encode_prompt("Hi.", "bob")
    assert torch.equal(alice.tensors[TEXT_IDS], bob.tensors[TEXT_IDS])
    assert torch.equal(lm.codec_condition(alice), lm.voice_embeddings["alice"])
    assert not torch.equal(lm.codec_condition(alice), lm.codec_condition(bob))
    assert lm.codec_condition(alice).shape == (192,) and lm.codec_condition(alice).dtype == torch.float32
    assert torch.equal(lm.codec_condition(lm.encode_prompt("Hi.", None)), lm.voice_embeddings[lm.voices[0]])
    with pytest.raises(ValueError, match="'nobody'.*alice"):
        lm.encode_prompt("Hi.", "nobody")


def test_a_reference_s_x_vector_replaces_the_voice(lm):
    embedding = torch.randn(192)
    prompt = lm.encode_prompt("Hi.", None, VoiceReference({SPEAKER_EMBEDDING: embedding}))
    assert torch.equal(lm.codec_condition(prompt), embedding)
    assert torch.equal(prompt.tensors[TEXT_IDS], lm.encode_prompt("Hi.", None).tensors[TEXT_IDS])
    with pytest.raises(ValueError, match="ref_codes"):
        lm.encode_prompt("Hi.", None, VoiceReference({SPEAKER_EMBEDDING: embedding, "ref_codes": torch.zeros(5, 1)}))
    with pytest.raises(ValueError, match=r"\[192\]"):
        lm.encode_prompt("Hi.", None, VoiceReference({SPEAKER_EMBEDDING: torch.zeros(80)}))
    with pytest.raises(ValueError, match="alice"):
        lm.encode_prompt("Hi.", "alice", VoiceReference({SPEAKER_EMBEDDING: embedding}))


def test_a_streamed_segment_continues_the_one_before_as_zero_shot(lm):
    from backend_python.models.text_segments import SegmentContext

    context = SegmentContext("Hello world.", torch.tensor([[5], [6], [7]]))
    prompt = lm.encode_segment("Hi.", "bob", context)
    prompt_text = lm.tokenizer(INSTRUCT_PREFIX + "Hello world.")["input_ids"]
    assert prompt.tensors[TEXT_IDS].tolist() == prompt_text + lm.tokenizer("Hi.")["input_ids"]
    assert prompt.num_tokens == 1 + len(prompt.tensors[TEXT_IDS]) + 1 + 3
    embeds = lm.prompt_embeddings(prompt)
    assert torch.equal(embeds[-3:], lm.speech_embedding.weight[5:8])
    assert lm.frame_limits(prompt) == lm.config.frame_limits(len(lm.tokenizer("Hi.")["input_ids"]))
    assert torch.equal(lm.codec_condition(prompt), lm.voice_embeddings["bob"])


# ---- checkpoints -----------------------------------------------------------------------------------
def assert_same_lm(loaded: CosyVoice3LM, lm: CosyVoice3LM) -> None:
    expected = lm.state_dict()
    assert loaded.state_dict().keys() == expected.keys()
    for name, value in loaded.state_dict().items():
        assert torch.equal(value, expected[name]), name


def test_our_checkpoint_round_trips(lm, tmp_path):
    save_checkpoint(lm, tmp_path)
    loaded = CosyVoice3LM.from_pretrained(tmp_path)
    assert_same_lm(loaded, lm)
    assert loaded.config == lm.config and loaded.voices == lm.voices
    assert all(torch.equal(loaded.voice_embeddings[v], lm.voice_embeddings[v]) for v in lm.voices)
    assert torch.equal(loaded.encode_prompt(TEXTS[0], None).tensors[TEXT_IDS],
                       lm.encode_prompt(TEXTS[0], None).tensors[TEXT_IDS])
    assert description.is_checkpoint(tmp_path) and not description.is_checkpoint(tmp_path / "nothing")
    assert family.preset_voices(ModelSpec("x", "cosyvoice3", checkpoint=tmp_path)) == lm.voices
    assert "llm.model.model.layers.1.self_attn.k_proj.bias" in loaded.state_dict()
    assert {"speech_embedding.weight", "llm_decoder.weight"} <= loaded.state_dict().keys()


OFFICIAL_YAML = """\
__set_seed1: !apply:random.seed [1986]
sample_rate: 24000
llm_input_size: {hidden}
llm_output_size: {hidden}
spk_embed_dim: 192
qwen_pretrain_path: ''
token_frame_rate: 25
llm: !new:cosyvoice.llm.llm.CosyVoice3LM
    llm_input_size: !ref <llm_input_size>
    llm_output_size: !ref <llm_output_size>
    speech_token_size: 6561
    length_normalized_loss: True
    mix_ratio: [5, 15]
    llm: !new:cosyvoice.llm.llm.Qwen2Encoder
        pretrain_path: !ref <qwen_pretrain_path>
    sampling: !name:cosyvoice.utils.common.ras_sampling
        top_p: 0.8
        top_k: 25
flow: !new:cosyvoice.flow.flow.CausalMaskedDiffWithDiT
    input_size: 80
    static_chunk_size: !ref <chunk_size> * <token_mel_ratio>
"""


def plain_qwen2_tokenizer():
    """A stand-in for CosyVoice-BlankEN's tokenizer: Qwen2's three specials only (CosyVoice 3's are added on load)."""
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    bpe = train_byte_level_bpe(specials, ["You are a helpful assistant."] * 20 + list(TINY_BPE_SENTENCES), 400)
    return Qwen2TokenizerFast(tokenizer_object=bpe, unk_token=None, bos_token=None, eos_token=specials[0],
                              pad_token=specials[0])


def test_an_official_directory_loads_through_the_same_code(lm, tmp_path):
    """cosyvoice3.yaml (hyperpyyaml tags), llm.pt (official names, with the tied text head), CosyVoice-BlankEN/
    (Qwen2 config and tokenizer) and spk2info.pt."""
    (tmp_path / "cosyvoice3.yaml").write_text(OFFICIAL_YAML.format(hidden=lm.config.llm.hidden_size))
    state = {**lm.state_dict(), "llm.model.lm_head.weight": lm.llm.model.model.embed_tokens.weight}
    torch.save({k: v.clone() for k, v in state.items()}, tmp_path / "llm.pt")
    blank = tmp_path / OFFICIAL_TEXT_LM_DIR
    blank.mkdir()
    (blank / "config.json").write_text(json.dumps(lm.config.llm.to_dict()))
    base_tokenizer = plain_qwen2_tokenizer()
    base_tokenizer.save_pretrained(str(blank))
    speakers = {"speaker_a": {"embedding": torch.randn(1, 192)}, "speaker_b": {"embedding": torch.randn(1, 192)}}
    torch.save(speakers, tmp_path / "spk2info.pt")

    loaded = CosyVoice3LM.from_pretrained(tmp_path)
    assert description.is_checkpoint(tmp_path) and loaded.voices == ("speaker_a", "speaker_b")
    assert_same_lm(loaded, lm)
    assert loaded.config.llm == lm.config.llm and loaded.config.speech_token_size == 6561
    # <|endofprompt|> comes right after Qwen2's tokens, as 151646 after Qwen2.5's 151646
    assert loaded.tokenizer.convert_tokens_to_ids("<|endofprompt|>") == len(base_tokenizer)
    prompt = loaded.encode_prompt("Hi.", "speaker_b")
    assert len(base_tokenizer) in prompt.tensors[TEXT_IDS].tolist()
    assert torch.equal(loaded.codec_condition(prompt), speakers["speaker_b"]["embedding"][0])
    assert family.preset_voices(ModelSpec("x", "cosyvoice3", checkpoint=tmp_path)) == ("speaker_a", "speaker_b")


def test_the_0_5b_preset_is_qwen2_5_0_5b_plus_the_speech_tables():
    config = cosyvoice3_0_5b()
    with torch.device("meta"):
        lm = CosyVoice3LM(config, None, random_voices(config, 0))
    backbone = sum(p.numel() for p in lm.llm.parameters())
    assert backbone == 494_032_768  # Qwen2.5-0.5B's published count (tied embeddings)
    assert sum(p.numel() for p in lm.parameters()) == config.num_parameters == backbone + 2 * 6761 * 896
    assert lm.llm_decoder.bias is None and lm.speech_embedding.weight.shape == (6761, 896)


# ---- the multi-token-prediction hook ---------------------------------------------------------------
class TwoFrameLM(CosyVoice3LM):
    """A stand-in for a multi-token-prediction subclass: the head's token, then a second one made from it."""

    frames_per_step = 2

    def sample_frames(self, hidden, inputs, noise):
        first = super().sample_frames(hidden, inputs, noise[:, :self.vocab.num_columns])
        return torch.cat((first, (first * 7 + 1) % NUM_CODES), dim=1)


def test_two_frames_per_step_feed_both_tokens_back(lm, reference):
    two = TwoFrameLM(lm.config, lm.tokenizer, lm.voice_embeddings)
    two.load_state_dict(lm.state_dict())
    two.allocate_slots(2, 64)
    two.prefill(1, two.encode_prompt(TEXTS[0], None))
    batch = DecodeBatch([1], [GREEDY], [torch.Generator()], [True])
    steps = [two.decode(batch) for _ in range(3)]
    assert steps[0][0].shape == (1, 2, 1) and steps[0][1].shape == (1, 2)
    tokens = torch.cat([codes[0, :, 0] for codes, _ in steps]).tolist()
    with torch.no_grad():
        logits = reference_logits(lm, reference, reference_embeddings(lm, TEXTS[0], tokens[:-1]))
    heads = logits[-len(tokens)::2, :NUM_CODES].argmax(dim=-1).tolist()  # each step's first token
    assert tokens[::2] == heads and two._states[1].position == two.encode_prompt(TEXTS[0], None).num_tokens + 6


# ---- the CUDA path's pieces ------------------------------------------------------------------------
def test_fused_projections_with_biases_compute_the_same(lm):
    """CUDA fuses q/k/v (weights and biases) and gate/up; on the CPU the fused math must match the plain one."""
    fused = CosyVoice3LM(lm.config, lm.tokenizer, lm.voice_embeddings)
    fused.load_state_dict(lm.state_dict())
    fused.backbone.fuse_projections()
    assert fused.llm.model.model.layers[0].self_attn.qkv_bias is not None
    assert fused.state_dict().keys() == lm.state_dict().keys()
    got, expected = (decode(m, [1], [TEXTS[0]], [GREEDY], [0], num_steps=4) for m in (fused, lm))
    assert torch.equal(got, expected)
    torch.testing.assert_close(fused._memory.hidden, lm._memory.hidden, rtol=0, atol=1e-5)


@pytest.fixture(scope="module")
def cuda_lm() -> CosyVoice3LM:
    """The 0.5B shapes (hidden 896, GQA 14/2, head_dim 64, the full text vocabulary) with 2 layers, bf16."""
    config = replace(cosyvoice3_0_5b(), llm=replace(cosyvoice3_0_5b().llm, num_hidden_layers=2))
    return CosyVoice3LM.from_config(config, device="cuda", dtype=torch.bfloat16, seed=0)


@needs_cuda
@pytest.mark.parametrize("mix", ["greedy", "sampled", "mixed"])
def test_graph_replay_equals_the_eager_step(cuda_lm, mix):
    assert_graph_replay_equals_eager(cuda_lm, sampling_mixes(GREEDY, SAMPLED)[mix][:3], 5, NUM_CODES)


@needs_cuda
def test_cuda_kernels_match_the_cpu_reference(cuda_lm):
    """Fused biased projections, fused RMSNorm and varlen flash attention (bf16) against the plain fp32 CPU code:
    the slots' hidden states after prefill."""
    with torch.device("meta"):
        cpu = CosyVoice3LM(cuda_lm.config, cuda_lm.tokenizer, cuda_lm.voice_embeddings)
    cpu.load_state_dict({k: v.float().cpu() for k, v in cuda_lm.state_dict().items()}, assign=True)
    hidden = []
    for model in (cuda_lm, cpu):
        model.allocate_slots(4, 64)
        for slot, text in zip([2, 0], TEXTS):
            model.prefill(slot, model.encode_prompt(text, None))
        hidden.append(model._memory.hidden[[2, 0]].clone())
    assert cuda_lm._memory.kv.is_varlen and cuda_lm.llm.model.model.layers[0].self_attn.qkv_bias is not None
    assert_close(*hidden)
