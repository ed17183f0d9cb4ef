"""Qwen3TTSLM: golden parity with the reference package, batching, sampling, loading."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from backend_python.models.base import DecodeBatch, SamplingParams
from backend_python.models.qwen3_tts import Qwen3TTSConfig, Qwen3TTSLM, build_tiny_checkpoint, preset_config
from backend_python.models.qwen3_tts.presets import REAL_VOICES
from backend_python.models.qwen3_tts.prompt import prompt_embeddings
from tests.golden import assert_float32_close, num_layers

torch.set_flush_denormal(True)
torch.set_num_threads(1)  # tiny ops: threads only add overhead

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "qwen3_tts_tiny"
GOLDEN_CASES = json.loads((FIXTURE / "golden.json").read_text())["cases"]
GREEDY = SamplingParams(temperature=0.0, repetition_penalty=1.05)
TEXTS = ["Hi.", "Get the trust fund to the bank early.", "Hello world, this is a tiny test of text to speech."]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    return build_tiny_checkpoint(tmp_path_factory.mktemp("qwen3_tts_tiny"), seed=0)


@pytest.fixture(scope="module")
def tiny_lm(tiny_dir) -> Qwen3TTSLM:
    return Qwen3TTSLM.from_pretrained(tiny_dir)


def embedding_layers(lm: Qwen3TTSLM) -> int:
    """A prompt embedding: the text projection's layers, and the sum with the codec embeddings."""
    return num_layers(lm.talker.text_projection) + 1


def logit_layers(lm: Qwen3TTSLM) -> int:
    """Codebook 0's logits: the text projection, the talker's layers and its head (not the code predictor's)."""
    return num_layers(lm.talker.text_projection, lm.talker.model, lm.talker.codec_head)


def batch(slots, params, seeds=None, ignore_eos=None) -> DecodeBatch:
    seeds = seeds or [0] * len(slots)
    return DecodeBatch(slots=list(slots), sampling=list(params),
                       generators=[torch.Generator().manual_seed(s) for s in seeds],
                       ignore_eos=ignore_eos or [True] * len(slots))


def run_alone(lm: Qwen3TTSLM, text: str, num_frames: int, params=GREEDY, seed=0, voice="tiny") -> torch.Tensor:
    lm.allocate_slots(1, 128)
    lm.prefill(0, lm.encode_prompt(text, voice))
    b = batch([0], [params], [seed])
    return torch.cat([lm.decode(b)[0] for _ in range(num_frames)])  # [T, 16]


# ---- golden parity with qwen-tts 0.1.1 (tools/make_qwen3_tts_fixture.py) --------------------------
@pytest.mark.parametrize("case", range(len(GOLDEN_CASES)))
def test_golden_prompt_prefill_and_greedy_frames(case):
    meta, golden = GOLDEN_CASES[case], np.load(FIXTURE / "golden.npz")
    lm = Qwen3TTSLM.from_pretrained(FIXTURE, language=meta["language"])
    prompt = lm.encode_prompt(meta["text"], meta["voice"])
    assert prompt.tensors["text_ids"].tolist() == golden[f"input_ids_{case}"].tolist()
    embeds, trailing = prompt_embeddings(lm.config, lm.talker, prompt, lm.device)
    assert_float32_close(embeds, torch.from_numpy(golden[f"prefill_embeds_{case}"]), embedding_layers(lm))
    assert_float32_close(trailing, torch.from_numpy(golden[f"trailing_{case}"]), embedding_layers(lm))
    assert prompt.num_tokens == embeds.shape[0]

    lm.allocate_slots(2, 64)
    lm.prefill(1, prompt)
    logits, codes = golden[f"logits_{case}"], golden[f"codes_{case}"]  # [T+1, V], [T, 16]
    assert_float32_close(lm._memory.logits[1], torch.from_numpy(logits[0]), logit_layers(lm))
    for t in range(codes.shape[0]):
        frame, is_eos = lm.decode(batch([1], [GREEDY], ignore_eos=[False]))
        assert frame[0].tolist() == codes[t].tolist(), f"frame {t}"
        assert not is_eos[0]
        assert_float32_close(lm._memory.logits[1], torch.from_numpy(logits[t + 1]), logit_layers(lm), f"frame {t}")


def test_fixture_keys_load_strictly_and_include_the_official_names():
    keys = set(load_file(str(FIXTURE / "model.safetensors")))
    lm = Qwen3TTSLM.from_pretrained(FIXTURE)
    assert set(lm.state_dict()) == keys
    for name in ("talker.model.layers.0.self_attn.q_proj.weight", "talker.model.codec_embedding.weight",
                 "talker.model.text_embedding.weight", "talker.text_projection.linear_fc1.bias",
                 "talker.codec_head.weight", "talker.code_predictor.model.codec_embedding.14.weight",
                 "talker.code_predictor.lm_head.14.weight", "talker.code_predictor.small_to_mtp_projection.weight"):
        assert name in keys


# ---- batching and sampling -------------------------------------------------------------------
@pytest.mark.parametrize("params", [GREEDY, SamplingParams(temperature=0.9, top_k=20, top_p=0.9)])
def test_batched_decode_equals_each_request_alone(tiny_lm, params):
    num_frames, seeds = 5, [11, 22, 33]
    alone = [run_alone(tiny_lm, text, num_frames, params, seed) for text, seed in zip(TEXTS, seeds)]
    tiny_lm.allocate_slots(5, 128)
    slots = [3, 0, 4]  # non-contiguous, unordered rows
    for slot, text in zip(slots, TEXTS):
        tiny_lm.prefill(slot, tiny_lm.encode_prompt(text, "tiny"))
    b = batch(slots, [params] * 3, seeds)
    frames = torch.stack([tiny_lm.decode(b)[0] for _ in range(num_frames)], dim=1)  # [3, T, 16]
    for row, expected in enumerate(alone):
        assert torch.equal(frames[row], expected)
    assert len({tuple(f.flatten().tolist()) for f in frames}) == 3  # the prompts really differ


def test_same_seed_same_tokens_different_seed_different_tokens(tiny_lm):
    params = SamplingParams(temperature=0.9, top_k=50, top_p=1.0, repetition_penalty=1.05)
    text = TEXTS[1]
    first, again = run_alone(tiny_lm, text, 6, params, 7), run_alone(tiny_lm, text, 6, params, 7)
    other = run_alone(tiny_lm, text, 6, params, 8)
    assert torch.equal(first, again)
    assert not torch.equal(first, other)


def test_repetition_penalty_matches_hf_and_is_applied_per_request(tiny_lm):
    from transformers import RepetitionPenaltyLogitsProcessor

    from backend_python.models.layers.sampling import apply_repetition_penalty

    logits, history = torch.randn(2, 40), torch.tensor([[3, 7, 3, 0], [39, 1, 2, 2]])
    seen = torch.zeros(2, 40, dtype=torch.bool).scatter(1, history, True)
    expected = RepetitionPenaltyLogitsProcessor(1.3)(history, logits.clone())
    assert torch.allclose(apply_repetition_penalty(logits, seen, torch.full((2, 1), 1.3)), expected)
    code0 = run_alone(tiny_lm, TEXTS[2], 12, SamplingParams(temperature=0.0, repetition_penalty=10.0))[:, 0]
    assert len(set(code0.tolist())) == 12  # a strong penalty forbids greedy repeats
    loops = run_alone(tiny_lm, TEXTS[2], 12, SamplingParams(temperature=0.0, repetition_penalty=1.0))[:, 0]
    assert len(set(loops.tolist())) < 12  # ...which this random model makes without it


def test_codes_shape_dtype_and_range(tiny_lm):
    codes = run_alone(tiny_lm, TEXTS[2], 4, SamplingParams(temperature=1.5, top_k=0), seed=3)
    assert codes.shape == (4, tiny_lm.num_codebooks) and codes.dtype == torch.int64
    assert 0 <= int(codes.min()) and int(codes.max()) < tiny_lm.config.talker.codebook_size


def test_eos_respects_min_frames_and_ignore_eos(tiny_lm, monkeypatch):
    eos = tiny_lm.config.talker.codec_eos_token_id
    logits = tiny_lm.talker.logits
    monkeypatch.setattr(tiny_lm.talker, "logits", lambda h: logits(h).index_add(
        1, torch.tensor([eos]), torch.full((h.shape[0], 1), 50.0)))  # EOS wins whenever allowed
    tiny_lm.allocate_slots(2, 64)
    for slot in (0, 1):
        tiny_lm.prefill(slot, tiny_lm.encode_prompt(TEXTS[0], "tiny"))
    b = batch([0, 1], [GREEDY, GREEDY], ignore_eos=[False, True])
    is_eos = torch.stack([tiny_lm.decode(b)[1] for _ in range(4)])  # [T, 2]
    assert is_eos[:, 0].tolist() == [False, False, True, True]  # never before 2 frames
    assert not is_eos[:, 1].any()


# ---- prompts, voices, loading ----------------------------------------------------------------
def test_unknown_voice_names_the_voice_and_the_known_ones(tiny_lm):
    with pytest.raises(ValueError, match=r"'nobody'.*tiny"):
        tiny_lm.encode_prompt("Hello.", "nobody")
    assert tiny_lm.voices == ("tiny", "tiny_b", *REAL_VOICES)  # and the CustomVoice checkpoint's speakers
    assert tiny_lm.encode_prompt("Hello.", None).tensors["speaker_id"] == tiny_lm.config.talker.spk_id["tiny"]


def test_voices_change_the_prefill(tiny_lm):
    tiny_lm.allocate_slots(len(tiny_lm.voices), 64)
    for slot, voice in enumerate(tiny_lm.voices):
        tiny_lm.prefill(slot, tiny_lm.encode_prompt(TEXTS[1], voice))
    for slot in range(1, len(tiny_lm.voices)):  # each voice's prefill differs from the first's
        assert (tiny_lm._memory.logits[0] - tiny_lm._memory.logits[slot]).abs().max() > 1e-3


def test_tiny_checkpoint_round_trip(tiny_dir, tiny_lm, tmp_path):
    assert Qwen3TTSConfig.from_json_file(tiny_dir / "config.json") == preset_config("qwen3-tts-tiny")
    assert (tiny_dir / "speech_tokenizer" / "config.json").exists()
    random = Qwen3TTSLM.from_config(preset_config("qwen3-tts-tiny"), seed=0)
    for name, tensor in random.state_dict().items():
        assert torch.equal(tensor, tiny_lm.state_dict()[name]), name
    again = load_file(str(build_tiny_checkpoint(tmp_path / "again", seed=0) / "model.safetensors"))
    first = load_file(str(tiny_dir / "model.safetensors"))
    assert all(torch.equal(first[k], again[k]) for k in first)
    other = load_file(str(build_tiny_checkpoint(tmp_path / "other", seed=1) / "model.safetensors"))
    assert not torch.equal(first["talker.codec_head.weight"], other["talker.codec_head.weight"])


@pytest.mark.parametrize("name, billions", [("qwen3-tts-0.6b", (0.8, 1.0)), ("qwen3-tts-1.7b", (1.8, 2.0))])
def test_real_presets_have_the_published_sizes(name, billions):
    with torch.device("meta"):
        lm = Qwen3TTSLM(preset_config(name), tokenizer=None)
    count = sum(p.numel() for p in lm.parameters()) / 1e9
    assert billions[0] < count < billions[1]
    assert lm.num_codebooks == 16 and lm.frame_rate == 12.5
