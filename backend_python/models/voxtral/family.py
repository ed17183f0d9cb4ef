"""Voxtral-TTS as the registry loads it; its presets, checkpoint and serving plan: description.py.

Checkpoint layout (checkpoint.py): Mistral's own (`params.json` with `multimodal.audio_model_args` and
`audio_tokenizer_args`, `consolidated.safetensors`, `tekken.json`, `voice_embedding/`), as
`mistralai/Voxtral-4B-TTS-2603` ships it.
"""
from __future__ import annotations

from pathlib import Path

import torch

from . import tiny
from .codec import LEFT_CONTEXT_FRAMES, VoxtralCodec
from .lm import VoxtralLM
from .presets import preset_config

RANDOM_SEED = 0


def build_tiny_checkpoint(preset: str, out_dir: Path) -> None:
    tiny.build_tiny_checkpoint(out_dir, seed=RANDOM_SEED)


def _config(spec):
    from .checkpoint import read_config
    return read_config(spec.checkpoint) if spec.checkpoint is not None else preset_config(spec.preset)


def load_lm(spec, device: str, dtype: torch.dtype) -> VoxtralLM:
    if spec.checkpoint is not None:
        return VoxtralLM.from_pretrained(spec.checkpoint, device=device, dtype=dtype)
    return VoxtralLM.from_config(preset_config(spec.preset), device=device, dtype=dtype, seed=RANDOM_SEED)


def load_codec(spec, device: str, dtype: torch.dtype) -> VoxtralCodec:
    """In `dtype` (the reference decodes in the model's dtype)."""
    from .checkpoint import codec_state, read_tensors
    config = _config(spec).codec
    if spec.checkpoint is not None:
        codec = VoxtralCodec.from_state(config, codec_state(read_tensors(spec.checkpoint)), device=device)
    else:
        codec = VoxtralCodec.from_config(config, device=device, seed=RANDOM_SEED).fold_weight_norm()
    return codec.to(dtype=dtype)


def load_voice_encoder(spec, device: str, dtype: torch.dtype) -> None:
    """None: the public checkpoint has no codec encoder, so no voice is cloned from audio."""
    return None


def preset_voices(spec) -> tuple[str, ...]:
    return _config(spec).voices


def codec_left_context_frames(spec) -> int:
    return LEFT_CONTEXT_FRAMES
