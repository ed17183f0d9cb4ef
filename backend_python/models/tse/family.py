"""tse as the registry loads it: the LM (its presets, checkpoint and serving plan: description.py). Its codec (both
directions) and its speaker encoder are those of the model its config names (`codec_model`, a Qwen3-TTS Base preset or
checkpoint): the registry loads them from that model's family (`codec_model_of`, registry.codec_owner), so no
family's code is imported here.

It takes no text: a request streams input audio in an audio-in session (vox_ensemble/audio_sessions.py) with the
target speaker's enrollment as `ref_audio` (x-vector only).
"""
from __future__ import annotations

from pathlib import Path

import torch

from . import tiny
from .config import TSEConfig
from .lm import TSELM
from .presets import preset_config

RANDOM_SEED = 0


def build_tiny_checkpoint(preset: str, out_dir: Path) -> None:
    tiny.build_tiny_checkpoint(out_dir, seed=RANDOM_SEED)


def _config(spec) -> TSEConfig:
    return TSEConfig.from_dir(spec.checkpoint) if spec.checkpoint is not None else preset_config(spec.preset)


def load_lm(spec, device: str, dtype: torch.dtype) -> TSELM:
    if spec.checkpoint is not None:
        return TSELM.from_pretrained(spec.checkpoint, device=device, dtype=dtype)
    return TSELM.from_config(preset_config(spec.preset), device=device, dtype=dtype, seed=RANDOM_SEED)


def codec_model_of(spec) -> str:
    """The model whose codec (both directions) and voice encoder this one uses: the registry loads them from it
    (registry.codec_owner)."""
    return _config(spec).codec_model


def preset_voices(spec) -> tuple[str, ...]:
    return ()
