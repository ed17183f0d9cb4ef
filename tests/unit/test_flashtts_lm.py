"""FlashTTS's LM: golden against FlashTTS's `inference_wrapper_mtp` recomputed from scratch each step on transformers'
Qwen2 (no KV cache, every accepted token appended to the input with its text-track token), its MTP block against
transformers' `Qwen2DecoderLayer`, the prompt, M tokens per step, seeds, batched and padded rows, end of speech,
voices, and the checkpoint round trip."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from transformers import Qwen2Config as HFQwen2Config
from transformers import Qwen2ForCausalLM
from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer

from backend_python.models.base import DecodeBatch, SamplingParams, VoiceReference
from backend_python.models.flashtts.checkpoint import save_checkpoint
from backend_python.models.flashtts.lm import FlashTTSLM
from backend_python.models.flashtts.presets import tiny
from backend_python.models.flashtts.prompt import TEXT_IDS, VOICE, make_prompt
from tests.unit.lm_graph_helpers import assert_padded_equals_eager, sampling_mixes

torch.set_flush_denormal(True)

NUM_CODES, M = 6561, 2  # the tiny preset: 2 MTP blocks run per step
TEXT = "Get the trust fund to the bank early."
GREEDY = SamplingParams(temperature=0.0, repetition_penalty=1.0)
SAMPLED = SamplingParams(temperature=1.0, top_k=25, top_p=0.8, repetition_penalty=1.1)


@pytest.fixture(scope="module")
def lm() -> FlashTTSLM:
    return FlashTTSLM.from_config(tiny(), seed=3)


@pytest.fixture(scope="module")
def reference(lm) -> Qwen2ForCausalLM:
    """transformers' Qwen2 holding our backbone's weights (`llm.model.*` are its names)."""
    hf = Qwen2ForCausalLM(HFQwen2Config(**lm.config.llm.to_dict())).eval()
    state = {k.removeprefix("llm.model."): v for k, v in lm.state_dict().items() if k.startswith("llm.model.")}
    missing, unexpected = hf.load_state_dict(state, strict=False)
    assert set(missing) <= {"lm_head.weight"} and not unexpected
    return hf


def reference_mtp_blocks(lm: FlashTTSLM) -> list[Qwen2DecoderLayer]:
    """FlashTTS's blocks: `Qwen2DecoderLayer(Qwen2Config(hidden_size, num_attention_heads=mtp_head_num,
    num_key_value_heads=mtp_head_num))` (here with the tiny MLP width), holding our `mtp_block.N` weights."""
    cfg = lm.config
    hf_cfg = HFQwen2Config(hidden_size=cfg.llm.hidden_size, num_attention_heads=cfg.mtp_head_num,
                           num_key_value_heads=cfg.mtp_head_num, intermediate_size=cfg.mtp_intermediate_size)
    hf_cfg._attn_implementation = "eager"
    blocks = []
    for block in lm.mtp_block:
        layer = Qwen2DecoderLayer(hf_cfg, layer_idx=0).eval()
        layer.load_state_dict(block.state_dict(), strict=True)
        blocks.append(layer)
    return blocks


def run_layer(layer: Qwen2DecoderLayer, hidden: torch.Tensor) -> torch.Tensor:
    """FlashTTS's `mtp_block[j](last_hidden)[0]`: one token, position 0 (cos 1, sin 0), no mask -> [B, H]."""
    head_dim = layer.self_attn.head_dim
    cos, sin = torch.ones(hidden.shape[0], 1, head_dim), torch.zeros(hidden.shape[0], 1, head_dim)
    out = layer(hidden[:, None], attention_mask=None, position_embeddings=(cos, sin))
    return (out[0] if isinstance(out, tuple) else out)[:, 0]


@torch.no_grad()
def flashtts_greedy(lm: FlashTTSLM, hf: Qwen2ForCausalLM, text: str, voice: str, num_steps: int) -> list[int]:
    """FlashTTS's inference_with_spkemb + inference_wrapper_mtp, greedy over the codes, without a cache."""
    prompt = lm.encode_prompt(text, voice)
    cfg, embed = lm.config, hf.model.embed_tokens
    text_emb = embed(prompt.tensors[TEXT_IDS])
    text_emb = text_emb[1:] + text_emb[0]  # the first token is the tag, added to the others
    speaker = lm.spk_embed_convert(F.normalize(prompt.tensors[VOICE][None, :cfg.speaker_embedding_dim], dim=1))[0]
    sot, sos = embed(torch.tensor([cfg.sot_token_id, cfg.sos_token_id]))
    lm_input, track = [sot + speaker, text_emb[0] + sos], text_emb[1:]
    blocks, out = reference_mtp_blocks(lm), []
    for _ in range(num_steps):
        last = hf.model(inputs_embeds=torch.stack(lm_input)[None]).last_hidden_state[:, -1]
        tokens = [int(lm.llm_decoder(run_layer(block, last))[0, :NUM_CODES].argmax()) for block in blocks[:M]]
        for token in tokens:
            n = len(out)
            lm_input.append(lm.speech_embedding.weight[token] + (track[n] if n < track.shape[0] else 0))
            out.append(token)
    return out


def decode(lm: FlashTTSLM, slots: list[int], voices: list[str | None], params: list[SamplingParams],
           seeds: list[int], num_steps: int, text: str = TEXT) -> torch.Tensor:
    """Fresh slots, then num_steps decode steps -> tokens [B, num_steps * M] (ignoring end of speech)."""
    lm.allocate_slots(8, 128)
    for slot, voice in zip(slots, voices):
        lm.prefill(slot, lm.encode_prompt(text, voice))
    batch = DecodeBatch(slots, params, [torch.Generator().manual_seed(s) for s in seeds], [True] * len(slots))
    return torch.cat([lm.decode(batch)[0][..., 0] for _ in range(num_steps)], dim=1)


def test_the_prompt_is_two_positions_with_the_text_riding_along(lm):
    prompt = lm.encode_prompt(TEXT, "alice")
    ids = prompt.tensors[TEXT_IDS]
    assert prompt.num_tokens == 2 and ids.tolist() == lm.tokenizer(TEXT)["input_ids"]
    assert torch.equal(lm.codec_condition(prompt), lm.voice_vectors["alice"])
    assert lm.codec_condition(prompt).shape == (320,)
    with torch.no_grad():
        embeds = lm.prompt_embeddings(prompt)
        text = lm.backbone.embed_text(ids)
        sos = lm.backbone.embed_text(torch.tensor(lm.config.sos_token_id))
    torch.testing.assert_close(embeds[1], text[1] + text[0] + sos)
    with pytest.raises(ValueError, match="at least 2"):
        make_prompt([ids[0].item()], lm.voice_vectors["alice"])


def test_decode_matches_flashtts_recomputing_everything_each_step(lm, reference):
    """The KV cache holds every token of a step (M positions), each with its text-track token while the text
    lasts (the text runs out after len(text ids) - 2 tokens: both regimes are covered)."""
    num_steps = 8
    tokens = decode(lm, [1], ["bob"], [GREEDY], [0], num_steps)[0].tolist()
    assert len(lm.encode_prompt(TEXT, "bob").tensors[TEXT_IDS]) - 2 < num_steps * M
    assert tokens == flashtts_greedy(lm, reference, TEXT, "bob", num_steps)
    assert lm._states[1].position == 2 + num_steps * M


def test_an_mtp_block_is_a_qwen2_decoder_layer_on_one_token(lm):
    hidden = torch.randn(3, lm.config.llm.hidden_size, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        for ours, theirs in zip(lm.mtp_block, reference_mtp_blocks(lm)):
            torch.testing.assert_close(ours(hidden), run_layer(theirs, hidden), rtol=1e-5, atol=1e-5)


def test_a_step_emits_m_tokens_with_end_of_speech_per_token(lm):
    lm.allocate_slots(2, 64)
    lm.prefill(0, lm.encode_prompt(TEXT, None))
    codes, is_eos = lm.decode(DecodeBatch([0], [SAMPLED], [torch.Generator().manual_seed(1)], [True]))
    assert lm.frames_per_step == M and codes.shape == (1, M, 1) and is_eos.shape == (1, M)
    assert 0 <= codes.min() and codes.max() < NUM_CODES and not is_eos.any()


def test_same_seed_same_tokens_and_rows_decode_as_if_alone(lm):
    first, again = (decode(lm, [1], [None], [SAMPLED], [5], num_steps=4) for _ in range(2))
    other = decode(lm, [1], [None], [SAMPLED], [6], num_steps=4)
    assert torch.equal(first, again) and not torch.equal(first, other)
    batched = decode(lm, [3, 1, 0], ["alice", None, "bob"], [SAMPLED, SAMPLED, GREEDY], [7, 5, 0], num_steps=4)
    assert torch.equal(batched[1], first[0])
    assert torch.equal(batched[2], decode(lm, [0], ["bob"], [GREEDY], [0], num_steps=4)[0])


@pytest.mark.parametrize("mix", ["greedy", "mixed"])
def test_padded_graph_bucket_equals_unpadded_eager_on_cpu(mix):
    """The CUDA-graph path's eager twin (padding rows on the scratch row, its text track included) is the CPU step."""
    lm = FlashTTSLM.from_config(tiny(), seed=1)
    assert_padded_equals_eager(lm, sampling_mixes(GREEDY, SAMPLED)[mix][:3], num_frames=4, max_seq_len=128)


def test_end_of_speech_is_forced_at_its_token_within_a_step():
    """max_frames = 20 tokens per text token lands inside a step: that token and the ones after it end the row."""
    lm = FlashTTSLM.from_config(replace(tiny(), max_token_text_ratio=2.5, min_token_text_ratio=0.0), seed=2)
    prompt = lm.encode_prompt("Hi there.", None)
    max_frames = lm.frame_limits(prompt)[1]
    lm.allocate_slots(1, 128)
    lm.prefill(0, prompt)
    batch = DecodeBatch([0], [GREEDY], [torch.Generator()], [False])
    flags = torch.cat([lm.decode(batch)[1][0] for _ in range((max_frames + M) // M)])
    assert max_frames % M == 1 and flags[max_frames] and not flags[:max_frames].any()


def test_voices_and_references(lm):
    with pytest.raises(ValueError, match="unknown voice"):
        lm.encode_prompt(TEXT, "nobody")
    with pytest.raises(ValueError, match="cannot clone"):
        lm.encode_prompt(TEXT, None, VoiceReference({"speaker_embedding": torch.zeros(192)}))
    assert torch.equal(decode(lm, [0], [None], [GREEDY], [0], num_steps=3),
                       decode(lm, [0], ["default"], [GREEDY], [0], num_steps=3))
    lm.allocate_slots(2, 64)
    for slot, voice in enumerate(("default", "alice")):
        lm.prefill(slot, lm.encode_prompt(TEXT, voice))
    hidden = lm._require_memory().hidden
    assert not torch.allclose(hidden[0], hidden[1])  # the speaker embedding enters the LM's first position


def test_our_checkpoint_round_trips(lm, tmp_path):
    save_checkpoint(lm, tmp_path)
    loaded = FlashTTSLM.from_pretrained(tmp_path)
    assert loaded.config == lm.config and loaded.voices == lm.voices
    assert all(torch.equal(loaded.voice_vectors[v], lm.voice_vectors[v]) for v in lm.voices)
    assert torch.equal(decode(loaded, [2], ["bob"], [SAMPLED], [4], num_steps=3),
                       decode(lm, [2], ["bob"], [SAMPLED], [4], num_steps=3))
