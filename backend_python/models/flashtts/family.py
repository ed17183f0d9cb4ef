"""FlashTTS (CosyVoice 2's speech LM with MTP heads + a mean-flow DiT and HiFi-GAN codec) as the registry loads it;
its presets, checkpoint and serving plan: description.py.

Checkpoints: our directory (config.json of model_type flashtts, with `codec/`; checkpoint.py). No voice cloning
yet: FlashTTS clones from a CAMPPlus x-vector and an ECAPA-TDNN embedding of the reference's mel, and neither
encoder is built here, so the voices are the checkpoint's presets.
"""
from __future__ import annotations

import dataclasses

import json
from pathlib import Path

import torch

from ..base import CodecWindowing
from ..checkpoint_io import CONFIG_FILE
from . import checkpoint, tiny
from .codec import FlashTTSCodec
from .codec_config import FlashTTSCodecConfig
from .lm import FlashTTSLM
from .presets import preset_config

RANDOM_SEED = 0


def build_tiny_checkpoint(preset: str, out_dir: Path) -> None:
    tiny.build_tiny_checkpoint(out_dir, seed=RANDOM_SEED)


def load_lm(spec, device: str, dtype: torch.dtype) -> FlashTTSLM:
    if spec.checkpoint is not None:
        return FlashTTSLM.from_pretrained(spec.checkpoint, device=device, dtype=dtype)
    return FlashTTSLM.from_config(preset_config(spec.preset), device=device, dtype=dtype, seed=RANDOM_SEED)


def load_codec(spec, device: str, dtype: torch.dtype, steps: int | None = None) -> FlashTTSCodec:
    """The DiT in the lane's dtype, the vocoder in float32; `steps`: the mean-flow evaluations (1 or 2), else the
    config's."""
    if spec.checkpoint is None:
        codec = FlashTTSCodec.from_config(FlashTTSCodecConfig.full(), device=device, dtype=dtype, seed=RANDOM_SEED)
    else:
        codec = FlashTTSCodec.from_pretrained(checkpoint.codec_dir(spec.checkpoint), device=device, dtype=dtype)
    if steps:
        codec.cfg = dataclasses.replace(codec.cfg, n_evals=steps)  # validated by the config
    return codec


def load_voice_encoder(spec, device: str, dtype: torch.dtype) -> None:
    """No voice cloning yet (see the module's docstring)."""
    return None


def preset_voices(spec) -> tuple[str, ...]:
    if spec.checkpoint is not None:
        return checkpoint.read_config(spec.checkpoint).voices
    return preset_config(spec.preset).voices


def codec_windowing(spec) -> CodecWindowing:
    """The codec's left context, lookahead and overlap, from its config alone."""
    return _codec_config(spec).windowing()


def codec_left_context_frames(spec) -> int:
    return codec_windowing(spec).left_context_frames


def _codec_config(spec) -> FlashTTSCodecConfig:
    if spec.checkpoint is None:
        return FlashTTSCodecConfig.full()
    config = checkpoint.codec_dir(spec.checkpoint) / CONFIG_FILE
    return FlashTTSCodecConfig.from_dict(json.loads(config.read_text()))
