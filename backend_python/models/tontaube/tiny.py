"""The `tontaube-tiny` checkpoint: random weights in the official bundle's layout (checkpoint.py), materialised
once so it loads through the same code as a real bundle: the four models, the preset voice, DualCodec's decoder
(`dualcodec/`) and a tiny VibeVoice acoustic tokenizer (`vibevoice/`, transformers' layout), so its codec
re-synthesises as the reference does (codec.py)."""
from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path

import torch

from ..layers.random_init import init_random_weights
from . import checkpoint, vibevoice
from .cascade import VoicePrompt
from .codec import DUALCODEC_CONFIG, DUALCODEC_DIR, DUALCODEC_WEIGHTS, VIBEVOICE_DIR, TontaubeCodec
from .config import ACOUSTIC_CODES, NUM_CODEBOOKS, SEMANTIC_CODES
from .dualcodec import tiny_config
from .dualcodec_encoder import DualCodecEncoderConfig, tiny_encoder_config
from .voice_encoder import save_tiny
from .predictor import Predictor
from .presets import tiny
from .text import TextTokenizer, tiny_tokenizer

VOICE_FRAMES = 12


def codec_config():
    """The golden test's tiny DualCodec widths over the model's real codebooks (16,384 and 4,096 codes)."""
    return replace(tiny_config(), semantic_codebook_size=SEMANTIC_CODES, codebook_size=ACOUSTIC_CODES)


def encoder_config() -> DualCodecEncoderConfig:
    """`codec_config()`'s decoder with the tiny encoder (dualcodec_encoder.py) at the same hop."""
    return replace(tiny_encoder_config(), semantic_codebook_size=SEMANTIC_CODES, codebook_size=ACOUSTIC_CODES)


def text_tokenizer() -> TextTokenizer:
    return TextTokenizer(tiny_tokenizer())


def random_voice(frames: int, seed: int) -> VoicePrompt:
    g = torch.Generator().manual_seed(seed)
    rows = [torch.randint(0, SEMANTIC_CODES if k == 0 else ACOUSTIC_CODES, (frames,), generator=g).tolist()
            for k in range(NUM_CODEBOOKS)]
    return VoicePrompt(tuple(tuple(r) for r in rows))


def build_tiny_checkpoint(out_dir: Path, seed: int = 0) -> None:
    config = tiny()
    states = []
    for k, predictor_config in enumerate(config.predictors):
        model = Predictor(predictor_config)
        init_random_weights(model, seed + k)
        states.append(model.state_dict())
    voices = {"tiny": torch.tensor(random_voice(VOICE_FRAMES, seed).rows)}
    checkpoint.write(out_dir, config, states, tiny_tokenizer(), voices)
    codec = TontaubeCodec.random(codec_config(), seed=seed, vibevoice_config=vibevoice.tiny_config())
    codec.resynth.save_dir(out_dir / VIBEVOICE_DIR)
    (out_dir / DUALCODEC_DIR).mkdir(exist_ok=True)
    (out_dir / DUALCODEC_DIR / DUALCODEC_CONFIG).write_text(json.dumps(asdict(codec_config())))
    save_tiny(out_dir, DUALCODEC_DIR, DUALCODEC_WEIGHTS, encoder_config(), codec.dualcodec.state_dict(), seed)
    (out_dir / "config.json").write_text(json.dumps({"model_type": "tontaube", "bundle": list(checkpoint.FOLDERS)}))
