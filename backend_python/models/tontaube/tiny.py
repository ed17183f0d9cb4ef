"""The `tontaube-tiny` checkpoint: random weights in the official bundle's layout (checkpoint.py), materialised
once so it loads through the same code as a real bundle."""
from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path

import torch
from safetensors.torch import save_file

from ..layers.random_init import init_random_weights
from . import checkpoint
from .cascade import VoicePrompt
from .codec import DUALCODEC_CONFIG, DUALCODEC_DIR, DUALCODEC_WEIGHTS, TontaubeCodec
from .config import ACOUSTIC_CODES, NUM_CODEBOOKS, SEMANTIC_CODES
from .dualcodec import tiny_config
from .predictor import Predictor
from .presets import tiny
from .text import TextTokenizer, tiny_tokenizer

VOICE_FRAMES = 12


def codec_config():
    """The golden test's tiny DualCodec widths over the model's real codebooks (16,384 and 4,096 codes)."""
    return replace(tiny_config(), semantic_codebook_size=SEMANTIC_CODES, codebook_size=ACOUSTIC_CODES)


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
    codec = TontaubeCodec.random(codec_config(), seed=seed)
    (out_dir / DUALCODEC_DIR).mkdir(exist_ok=True)
    save_file({k: v.contiguous() for k, v in codec.dualcodec.state_dict().items()},
              str(out_dir / DUALCODEC_DIR / DUALCODEC_WEIGHTS))
    (out_dir / DUALCODEC_DIR / DUALCODEC_CONFIG).write_text(json.dumps(asdict(codec_config())))
    (out_dir / "config.json").write_text(json.dumps({"model_type": "tontaube", "bundle": list(checkpoint.FOLDERS)}))
