"""Build the golden fixture for Qwen3-TTS Base (voice cloning) from the official reference code.

Run with the reference venv (qwen-tts 0.1.1, transformers 4.57.3: tools/make_qwen3_tts_fixture.py says how
it is built), from the repo root:

    $QWEN_TTS_VENV/bin/python tools/make_qwen3_tts_base_fixture.py [OUT_DIR]

OUT_DIR defaults to tests/fixtures/qwen3_tts_tiny_base/. The talker is the LM fixture's tiny one
(tools/make_qwen3_tts_fixture.py) as a Base model; the speaker encoder and the codec encoder get the
random weights of our own tiny voice encoder (`Qwen3TTSVoiceEncoder.from_config(seed=SEED)`), loaded
into the reference modules, so their names are checked here too. It writes a checkpoint in the official
layout (config.json, model.safetensors in fp16 with `talker.*` and `speaker_encoder.*`, the tokenizer
files, speech_tokenizer/ with the reference config and the encoder's tensors only) and golden.npz /
golden.json: a fixed waveform, the reference's speaker embedding and codes for it, and per case (one
x-vector, two in-context) the prompt ids, prefill embeddings, trailing text embeddings and greedy frames.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tools.make_qwen3_tts_fixture import NUM_CODES, build_config, build_tokenizer  # noqa: E402  (+ torchaudio stub)

import numpy as np  # noqa: E402
import torch  # noqa: E402
from qwen_tts import Qwen3TTSModel  # noqa: E402
from qwen_tts.core import Qwen3TTSTokenizerV2Config, Qwen3TTSTokenizerV2Model  # noqa: E402
from qwen_tts.core.models import Qwen3TTSForConditionalGeneration, Qwen3TTSProcessor  # noqa: E402
from qwen_tts.core.models.configuration_qwen3_tts import Qwen3TTSSpeakerEncoderConfig  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

from backend_python.models.qwen3_tts.codec_config import FIXTURE_SHAPE, tiny_codec_config  # noqa: E402
from backend_python.models.qwen3_tts.codec_encoder import tiny_codec_encoder_config  # noqa: E402
from backend_python.models.qwen3_tts.config import tiny_speaker_encoder_config  # noqa: E402
from backend_python.models.qwen3_tts.voice_encoder import Qwen3TTSVoiceEncoder  # noqa: E402

SEED = 0
NUM_SAMPLES = 16000  # 2/3 s at 24 kHz: 9 frames, the last one partial
MAX_NEW_TOKENS = 7
REPETITION_PENALTY = 1.05
CASES = [  # (text, language, ref_text or None for x-vector only)
    ("Get the trust fund to the bank early.", "auto", None),
    ("Hello world, the quick brown fox.", "english", "The quick brown fox jumps over the lazy dog."),
    ("Hi.", "auto", "Hi."),  # text shorter than the reference codes: tts_pad fills, nothing trails
]


def encoder_config():
    """Our tiny codec encoder with the talker's codebook size, its 16 codebooks of the 20 it has kept (the
    fixture's shape: the tiny preset keeps 4 of 8)."""
    return dataclasses.replace(tiny_codec_encoder_config(), codebook_size=NUM_CODES, num_quantizers=20,
                               valid_num_quantizers=FIXTURE_SHAPE["num_quantizers"])


def waveform() -> torch.Tensor:
    """Two chirps plus noise, within [-1, 1]: [NUM_SAMPLES] float32."""
    g = torch.Generator().manual_seed(SEED + 7)
    t = torch.arange(NUM_SAMPLES, dtype=torch.float64) / 24000
    tone = 0.4 * torch.sin(2 * np.pi * (150 + 400 * t) * t) + 0.2 * torch.sin(2 * np.pi * (900 - 300 * t) * t)
    return (tone + 0.05 * torch.randn(NUM_SAMPLES, generator=g, dtype=torch.float64)).float()


def build_models(tok):
    cfg = build_config(tok)
    cfg.tts_model_type = "base"
    cfg.talker_config.spk_id, cfg.talker_config.spk_is_dialect = {}, {}
    speaker = tiny_speaker_encoder_config(cfg.talker_config.hidden_size)
    cfg.speaker_encoder_config = Qwen3TTSSpeakerEncoderConfig(**speaker.to_dict())
    torch.manual_seed(SEED)
    model = Qwen3TTSForConditionalGeneration(cfg).eval()
    ours = Qwen3TTSVoiceEncoder.from_config(speaker, encoder_config(), seed=SEED)
    missing, unexpected = model.speaker_encoder.load_state_dict(strip(ours.speaker_state(), "speaker_encoder."), strict=True)
    model = model.half().float()  # the fp16 checkpoint then holds exactly the weights that ran

    codec_cfg = tiny_codec_config(**FIXTURE_SHAPE).to_official()
    encoder_cfg = encoder_config()
    st_cfg = Qwen3TTSTokenizerV2Config(encoder_config=encoder_cfg.to_official(), decoder_config=codec_cfg["decoder_config"],
                                       encoder_valid_num_quantizers=encoder_cfg.valid_num_quantizers)
    st_cfg._attn_implementation = "sdpa"
    st_cfg.encoder_config._attn_implementation = "sdpa"
    st_cfg.decoder_config._attn_implementation = "sdpa"
    st_model = Qwen3TTSTokenizerV2Model(st_cfg).eval()
    missing, unexpected = st_model.encoder.load_state_dict(strip(ours.codec_state(), "encoder."), strict=False)
    assert not unexpected, unexpected  # every tensor we build is the reference's
    assert all(".acoustic_residual_vector_quantizer.layers." in k or "output_proj" in k or "decoder" in k
               or "upsample" in k for k in missing), missing  # only what encoding does not read
    return model, st_model


def strip(state: dict, prefix: str) -> dict:
    return {k[len(prefix):]: v for k, v in state.items()}


def run_case(tts: Qwen3TTSModel, text: str, language: str, ref_text: str | None, embedding, codes) -> dict:
    model, talker = tts.model, tts.model.talker
    ids = tts._tokenize_texts([tts._build_assistant_text(text)])
    ref_ids = [None if ref_text is None else tts._tokenize_texts([tts._build_ref_text(ref_text)])[0]]
    prompt = {"ref_code": [None if ref_text is None else codes], "ref_spk_embedding": [embedding],
              "x_vector_only_mode": [ref_text is None], "icl_mode": [ref_text is not None]}
    record = {"codes": []}
    forward = talker.forward

    @functools.wraps(forward)
    def spy(*args, **kwargs):
        out = forward(*args, **kwargs)
        if kwargs.get("inputs_embeds") is not None and kwargs["inputs_embeds"].shape[1] > 1:
            record["prefill_embeds"] = kwargs["inputs_embeds"][0].clone()
            record["trailing"] = kwargs["trailing_text_hidden"][0].clone()
        if out.hidden_states[1] is not None:
            record["codes"].append(out.hidden_states[1][0].clone())
        return out

    talker.forward = spy
    try:
        with torch.no_grad():
            model.generate(input_ids=ids, ref_ids=ref_ids, voice_clone_prompt=prompt, languages=[language],
                           non_streaming_mode=False, max_new_tokens=MAX_NEW_TOKENS, do_sample=False,
                           subtalker_dosample=False, repetition_penalty=REPETITION_PENALTY)
    finally:
        del talker.forward
    return {"input_ids": ids[0][0], "prefill_embeds": record["prefill_embeds"], "trailing": record["trailing"],
            "codes": torch.stack(record["codes"])}


def save(out: Path, model, st_model, tok, wav, embedding, codes, cases) -> None:
    out.mkdir(parents=True, exist_ok=True)
    model.half().save_pretrained(str(out), safe_serialization=True)
    tok.save_pretrained(str(out))
    config = json.loads((out / "config.json").read_text())
    config["speaker_encoder_config"].pop("model_type", None)  # the reference's own loader rejects it
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    folder = out / "speech_tokenizer"
    st_model.save_pretrained(str(folder))
    encoder = {f"encoder.{k}": v.contiguous() for k, v in st_model.encoder.state_dict().items()
               if "decoder" not in k and "upsample" not in k}
    save_file(encoder, str(folder / "model.safetensors"), metadata={"format": "pt"})  # the decoder is left out
    arrays = {"waveform": wav.numpy(), "speaker_embedding": embedding.numpy(), "ref_codes": codes.numpy()}
    meta = {"seed": SEED, "max_new_tokens": MAX_NEW_TOKENS, "repetition_penalty": REPETITION_PENALTY,
            "reference": "qwen-tts 0.1.1, transformers 4.57.3", "cases": []}
    for i, ((text, language, ref_text), case) in enumerate(zip(CASES, cases)):
        for key, value in case.items():
            arrays[f"{key}_{i}"] = value.numpy()
        meta["cases"].append({"text": text, "language": language, "ref_text": ref_text})
    np.savez_compressed(out / "golden.npz", **arrays)
    (out / "golden.json").write_text(json.dumps(meta, indent=2) + "\n")


def main() -> None:
    torch.set_num_threads(1)
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "tests/fixtures/qwen3_tts_tiny_base"
    tok = build_tokenizer()
    model, st_model = build_models(tok)
    wav = waveform()
    embedding = model.extract_speaker_embedding(wav.numpy(), 24000).float()
    with torch.no_grad():
        codes = st_model.encode(wav[None], torch.ones(1, NUM_SAMPLES, dtype=torch.long)).audio_codes[0]
    tts = Qwen3TTSModel(model=model, processor=Qwen3TTSProcessor(tokenizer=tok), generate_defaults={})
    cases = [run_case(tts, text, language, ref_text, embedding, codes) for text, language, ref_text in CASES]
    save(out, model, st_model, tok, wav, embedding, codes, cases)
    print(f"speaker embedding {embedding[:4].tolist()}, codes {tuple(codes.shape)} first {codes[0].tolist()}")
    for (text, _, ref_text), case in zip(CASES, cases):
        print(f"{text!r} ref={ref_text!r}: prefill {tuple(case['prefill_embeds'].shape)}, "
              f"trailing {tuple(case['trailing'].shape)}, code0 {case['codes'][:, 0].tolist()}")
    print("wrote", out, sorted(p.name for p in out.iterdir()))


if __name__ == "__main__":
    main()
