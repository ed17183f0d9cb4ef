"""Build the golden fixture for our Qwen3-TTS LM from the official reference code.

Run with a venv of the reference, never with the project venv (PyPI qwen-tts 0.1.1 and transformers 4.57.3:
`python -m venv $QWEN_TTS_VENV && $QWEN_TTS_VENV/bin/pip install qwen-tts==0.1.1 transformers==4.57.3`):

    $QWEN_TTS_VENV/bin/python tools/make_qwen3_tts_fixture.py [OUT_DIR]

OUT_DIR defaults to tests/fixtures/qwen3_tts_tiny/. It writes a tiny random-weight checkpoint in the
official layout (config.json, model.safetensors in fp16, tokenizer files) and golden.npz/golden.json:
prompt ids, prefill embeddings, trailing text embeddings, talker logits after prefill and after each
frame, and greedy frames [T, 16] from `Qwen3TTSForConditionalGeneration.generate` (do_sample=False
for talker and sub-talker). The weights are rounded to fp16 before the reference runs, so the saved
checkpoint holds exactly the weights that produced the goldens. speech_tokenizer/ is left to the
codec's own fixture. Deterministic: fixed seed, CPU, 1 thread.
"""
from __future__ import annotations

import functools
import json
import os
import sys
import types
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def install_torchaudio_stub() -> None:
    """qwen_tts imports torchaudio.compliance.kaldi for its 25 Hz tokenizer only; no wheel fits torch 2.13."""
    def fbank(*args, **kwargs):
        raise NotImplementedError("torchaudio stub: the 25 Hz tokenizer is not used here")

    torchaudio = types.ModuleType("torchaudio")
    compliance = types.ModuleType("torchaudio.compliance")
    kaldi = types.ModuleType("torchaudio.compliance.kaldi")
    kaldi.fbank = fbank
    torchaudio.compliance, compliance.kaldi = compliance, kaldi
    sys.modules.update({"torchaudio": torchaudio, "torchaudio.compliance": compliance,
                        "torchaudio.compliance.kaldi": kaldi})


import numpy as np  # noqa: E402
import torch  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402
from transformers import Qwen2TokenizerFast  # noqa: E402

install_torchaudio_stub()  # after transformers, whose import-time package probe rejects a spec-less module
from qwen_tts import Qwen3TTSModel  # noqa: E402
from qwen_tts.core.models import Qwen3TTSConfig, Qwen3TTSForConditionalGeneration, Qwen3TTSProcessor  # noqa: E402

SEED = 0
# Smaller than the qwen3-tts-tiny preset (hidden 64) to keep the fixture small; the 1024 control ids
# make codec_embedding and codec_head at least 1024 x hidden each.
NUM_CODES = 32  # per-codebook size (real: 2048)
TALKER_VOCAB = NUM_CODES + 1024  # codes + 1024 control ids (real: 3072)
SPECIAL_BASE = NUM_CODES + 100  # control ids start 100 above the codes (real: pad 2148)
MAX_NEW_TOKENS = 7  # -> 6 full frames (the last sampled codebook-0 token is never fed back)
REPETITION_PENALTY = 1.05
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|tts_pad|>", "<|tts_text_bos|>", "<|tts_text_eod|>"]
CASES = [  # (text, speaker, language): both codec-prefix variants (auto: nothink; english: think + tag)
    ("Get the trust fund to the bank early.", "tiny", "auto"),
    ("Hello world, the quick brown fox.", "tiny_b", "english"),
]


def build_tokenizer() -> Qwen2TokenizerFast:
    bpe = Tokenizer(models.BPE(unk_token=None))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    corpus = ["assistant user system\n"] * 50 + [
        "The quick brown fox jumps over the lazy dog.",
        "Get the trust fund to the bank early.",
        "Hello world, this is a tiny tokenizer for testing text to speech.",
    ]
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    bpe.train_from_iterator(corpus, trainer)
    tok = Qwen2TokenizerFast(tokenizer_object=bpe, unk_token=None, bos_token=None, eos_token="<|endoftext|>",
                             pad_token="<|endoftext|>", errors="replace")
    tok.add_special_tokens({"additional_special_tokens": SPECIALS[1:]})
    return tok


def build_config(tok: Qwen2TokenizerFast) -> Qwen3TTSConfig:
    ids = {s: tok.convert_tokens_to_ids(s) for s in SPECIALS}
    s = SPECIAL_BASE
    talker = dict(
        vocab_size=TALKER_VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, text_vocab_size=len(tok), text_hidden_size=16,
        num_code_groups=16, rope_theta=1e6, max_position_embeddings=4096,
        rope_scaling={"rope_type": "default", "mrope_section": [2, 1, 1], "interleaved": True},
        codec_pad_id=s, codec_bos_id=s + 1, codec_eos_token_id=s + 2, codec_think_id=s + 6,
        codec_nothink_id=s + 7, codec_think_bos_id=s + 8, codec_think_eos_id=s + 9,
        codec_language_id={"english": NUM_CODES + 2},
        spk_id={"tiny": TALKER_VOCAB - 10, "tiny_b": TALKER_VOCAB - 11},
        spk_is_dialect={"tiny": False, "tiny_b": False},
        code_predictor_config=dict(vocab_size=NUM_CODES, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1, head_dim=8, num_code_groups=16,
                                   rope_theta=1e6, max_position_embeddings=64))
    cfg = Qwen3TTSConfig(talker_config=talker, tokenizer_type="qwen3_tts_tokenizer_12hz", tts_model_size="tiny",
                         tts_model_type="custom_voice", im_start_token_id=ids["<|im_start|>"],
                         im_end_token_id=ids["<|im_end|>"], tts_pad_token_id=ids["<|tts_pad|>"],
                         tts_bos_token_id=ids["<|tts_text_bos|>"], tts_eos_token_id=ids["<|tts_text_eod|>"])
    cfg._attn_implementation = "sdpa"
    return cfg


def build_model(cfg: Qwen3TTSConfig) -> Qwen3TTSForConditionalGeneration:
    torch.manual_seed(SEED)
    model = Qwen3TTSForConditionalGeneration(cfg).eval()
    return model.half().float()  # the fp16 checkpoint then holds exactly the weights that ran


def spy_forward(talker, record: dict):
    """Wrap the talker's forward to keep the prefill's inputs, and every step's logits and codes."""
    forward = talker.forward

    @functools.wraps(forward)  # generate() validates kwargs against forward's signature
    def spy(*args, **kwargs):
        out = forward(*args, **kwargs)
        if kwargs.get("inputs_embeds") is not None and kwargs["inputs_embeds"].shape[1] > 1:
            record["prefill_embeds"] = kwargs["inputs_embeds"][0].clone()
            record["trailing"] = kwargs["trailing_text_hidden"][0].clone()
        record["logits"].append(out.logits[0, -1].clone())
        if out.hidden_states[1] is not None:
            record["codes"].append(out.hidden_states[1][0].clone())
        return out
    return spy


def run_case(tts: Qwen3TTSModel, text: str, speaker: str, language: str) -> dict:
    """Greedy generate, recording every talker forward (prefill + one per frame)."""
    model, talker = tts.model, tts.model.talker
    ids = tts._tokenize_texts([tts._build_assistant_text(text)])
    record = {"logits": [], "codes": []}
    talker.forward = spy_forward(talker, record)
    try:
        with torch.no_grad():
            codes_list, _ = model.generate(
                input_ids=ids, languages=[language], speakers=[speaker], non_streaming_mode=False,
                max_new_tokens=MAX_NEW_TOKENS, do_sample=False, subtalker_dosample=False,
                repetition_penalty=REPETITION_PENALTY)
    finally:
        del talker.forward
    frames = torch.stack(record["codes"])  # [T, 16]
    return {"input_ids": ids[0][0], "prefill_embeds": record["prefill_embeds"], "trailing": record["trailing"],
            "logits": torch.stack(record["logits"]), "codes": frames,
            "num_frames_returned": int(codes_list[0].shape[0])}


def save(out: Path, model, tok, cases: list[dict]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    model.half().save_pretrained(str(out), safe_serialization=True)
    model.float()
    tok.save_pretrained(str(out))
    arrays, meta = {}, {"seed": SEED, "max_new_tokens": MAX_NEW_TOKENS, "repetition_penalty": REPETITION_PENALTY,
                        "reference": "qwen-tts 0.1.1, transformers 4.57.3", "cases": []}
    for i, ((text, speaker, language), case) in enumerate(zip(CASES, cases)):
        for key in ("input_ids", "prefill_embeds", "trailing", "logits", "codes"):
            arrays[f"{key}_{i}"] = case[key].numpy()
        meta["cases"].append({"text": text, "voice": speaker, "language": language,
                              "num_frames": int(case["codes"].shape[0]),
                              "num_frames_returned": case["num_frames_returned"]})
    np.savez_compressed(out / "golden.npz", **arrays)
    (out / "golden.json").write_text(json.dumps(meta, indent=2) + "\n")


def main() -> None:
    torch.set_num_threads(1)
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "tests/fixtures/qwen3_tts_tiny"
    tok = build_tokenizer()
    model = build_model(build_config(tok))
    tts = Qwen3TTSModel(model=model, processor=Qwen3TTSProcessor(tokenizer=tok), generate_defaults={})
    cases = [run_case(tts, *case) for case in CASES]
    save(out, model, tok, cases)
    for (text, _, _), case in zip(CASES, cases):
        print(f"{text!r}: {len(case['input_ids'])} ids, frames {tuple(case['codes'].shape)}, "
              f"code0 {case['codes'][:, 0].tolist()}")
    print("wrote", out, sorted(p.name for p in out.iterdir()))


if __name__ == "__main__":
    main()
