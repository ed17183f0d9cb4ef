"""CosyVoice 3 (a Qwen2 speech LM + a flow-matching codec) as the registry loads it (its presets, checkpoints and
plan: description.py).

Checkpoints: our directory (config.json of model_type cosyvoice3, with `codec/` and `campplus/`) or an official
Fun-CosyVoice3-0.5B directory (cosyvoice3.yaml, llm.pt, flow.pt, hift.pt, CosyVoice-BlankEN/, campplus.onnx);
see checkpoint.py. The codec and the voice encoder are read through their own modules (codec.py,
voice_encoder.py), imported only when loaded.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from ..base import CodecWindowing
from . import checkpoint, tiny
from .description import is_official
from .lm import CosyVoice3LM
from .presets import preset_config

RANDOM_SEED = 0


def build_tiny_checkpoint(preset: str, out_dir: Path) -> None:
    tiny.build_tiny_checkpoint(out_dir, seed=RANDOM_SEED)


def load_lm(spec, device: str, dtype: torch.dtype) -> CosyVoice3LM:
    if spec.checkpoint is not None:
        return CosyVoice3LM.from_pretrained(spec.checkpoint, device=device, dtype=dtype)
    return CosyVoice3LM.from_config(preset_config(spec.preset), device=device, dtype=dtype, seed=RANDOM_SEED)


def load_codec(spec, device: str, dtype: torch.dtype, steps: int | None = None):
    """The flow (its Euler steps: `steps`, else the config's 10) and HiFT."""
    from .codec import CosyVoice3Codec, CosyVoice3CodecConfig

    if spec.checkpoint is None:
        return CosyVoice3Codec.from_config(CosyVoice3CodecConfig.full(), device=device, dtype=dtype, seed=RANDOM_SEED,
                                           n_timesteps=steps)
    return CosyVoice3Codec.from_pretrained(checkpoint.codec_dir(spec.checkpoint), device=device, dtype=dtype,
                                           n_timesteps=steps)


def load_voice_encoder(spec, device: str, dtype: torch.dtype):
    """CAMPPlus: reference audio -> the 192-d speaker embedding the codec is conditioned on (x-vector cloning).
    Always float32, as CosyVoice runs it (6.8 M parameters; bfloat16 moved the embedding by 0.7 % of its norm)."""
    from .voice_encoder import CampPlusConfig, CampPlusEncoder

    if spec.checkpoint is None:
        return CampPlusEncoder.from_config(CampPlusConfig.full(), device=device, dtype=torch.float32,
                                           seed=RANDOM_SEED + 1)
    return CampPlusEncoder.from_pretrained(checkpoint.voice_encoder_dir(spec.checkpoint), device=device,
                                           dtype=torch.float32)


def preset_voices(spec) -> tuple[str, ...]:
    """The LM's voices (our checkpoint's config, an official spk2info.pt's speakers, or the preset's)."""
    if spec.checkpoint is not None:
        return checkpoint.read_config(spec.checkpoint).voices
    return preset_config(spec.preset).voices


def codec_windowing(spec) -> CodecWindowing:
    """The codec's left context, lookahead and overlap, from its config alone."""
    return _codec_config(spec).windowing


def codec_left_context_frames(spec) -> int:
    return codec_windowing(spec).left_context_frames


def _codec_config(spec):
    """Our checkpoint's codec/codec_config.json; the full config for a random preset and an official directory
    (whose yaml holds the codec's sizes, not its serving windows)."""
    from .codec import CONFIG_FILE, CosyVoice3CodecConfig

    if spec.checkpoint is None or is_official(spec.checkpoint):
        return CosyVoice3CodecConfig.full()
    config = checkpoint.codec_dir(spec.checkpoint) / CONFIG_FILE
    return CosyVoice3CodecConfig.from_dict(json.loads(config.read_text()))
