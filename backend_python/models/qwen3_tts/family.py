"""Qwen3-TTS (12 Hz) as the registry loads it; its presets, checkpoint and serving plan: description.py.

Checkpoint layout (the official one): `config.json` (model_type `qwen3_tts`),
`model.safetensors`, the text tokenizer files, and `speech_tokenizer/` holding
the 12 Hz codec (`config.json` + `model.safetensors`).
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from backend_python.models.qwen3_tts import tiny
from backend_python.models.qwen3_tts.checkpoint import read_config
from backend_python.models.qwen3_tts.codec_encoder import CodecEncoderConfig
from backend_python.models.qwen3_tts.codec import Qwen3TTSCodec
from backend_python.models.qwen3_tts.description import CODEC_DIR
from backend_python.models.qwen3_tts.codec_config import Qwen3TTSCodecConfig, full_codec_config
from backend_python.models.qwen3_tts.lm import Qwen3TTSLM
from backend_python.models.qwen3_tts.presets import preset_config
from backend_python.models.qwen3_tts.voice_encoder import Qwen3TTSVoiceEncoder

RANDOM_SEED = 0


def build_tiny_checkpoint(preset: str, out_dir: Path) -> None:
    tiny.build_tiny_checkpoint(out_dir, seed=RANDOM_SEED, is_base=preset_config(preset).is_base)


def load_lm(spec, device: str, dtype: torch.dtype) -> Qwen3TTSLM:
    if spec.checkpoint is not None:
        return Qwen3TTSLM.from_pretrained(spec.checkpoint, device=device, dtype=dtype)
    return Qwen3TTSLM.from_config(preset_config(spec.preset), device=device, dtype=dtype, seed=RANDOM_SEED)


def load_codec(spec, device: str, dtype: torch.dtype) -> Qwen3TTSCodec:
    if spec.checkpoint is not None:
        return Qwen3TTSCodec.from_pretrained(spec.checkpoint / CODEC_DIR, device=device, dtype=dtype)
    return Qwen3TTSCodec.from_config(full_codec_config(), device=device, dtype=dtype, seed=RANDOM_SEED)


def load_voice_encoder(spec, device: str, dtype: torch.dtype) -> Qwen3TTSVoiceEncoder | None:
    """A Base model's (tts_model_type "base") speaker and codec encoders; None for a preset-voice model."""
    if spec.checkpoint is not None:
        if not read_config(spec.checkpoint).is_base:
            return None
        return Qwen3TTSVoiceEncoder.from_pretrained(spec.checkpoint, device=device, dtype=dtype)
    config = preset_config(spec.preset)
    if not config.is_base:
        return None
    return Qwen3TTSVoiceEncoder.from_config(config.speaker_encoder, CodecEncoderConfig(), device=device, dtype=dtype,
                                            seed=RANDOM_SEED)


def preset_voices(spec) -> tuple[str, ...]:
    """The CustomVoice speakers of the config; none for a Base model (as `Qwen3TTSLM.voices`)."""
    config = read_config(spec.checkpoint) if spec.checkpoint is not None else preset_config(spec.preset)
    return () if config.is_base else tuple(config.talker.spk_id)


def codec_left_context_frames(spec) -> int:
    if spec.checkpoint is None:
        return full_codec_config().left_context_frames
    official = json.loads((spec.checkpoint / CODEC_DIR / "config.json").read_text())
    return Qwen3TTSCodecConfig.from_official(official).left_context_frames
