"""Higgs Audio v3 as the registry loads it; its presets, checkpoint and serving plan: description.py.

Checkpoint layout (checkpoint.py): the LM as Boson AI's `HiggsAudioModel` saves it (config.json with
model_type `higgs_audio` and a `qwen3` text_config), its text tokenizer, voices.safetensors, and the audio
tokenizer in `audio_tokenizer/`.
"""
from __future__ import annotations

from pathlib import Path

import torch

from ..base import CodecWindowing
from . import tiny
from .codec import WINDOWING, HiggsTokenizerCodec
from .lm import HiggsV3LM
from .presets import preset_config
from .voice_encoder import HiggsVoiceEncoder, hubert_config

RANDOM_SEED = 0


def build_tiny_checkpoint(preset: str, out_dir: Path) -> None:
    tiny.build_tiny_checkpoint(out_dir, seed=RANDOM_SEED)


def _config(spec):
    from .checkpoint import read_config
    return read_config(spec.checkpoint) if spec.checkpoint is not None else preset_config(spec.preset)


def load_lm(spec, device: str, dtype: torch.dtype) -> HiggsV3LM:
    if spec.checkpoint is not None:
        return HiggsV3LM.from_pretrained(spec.checkpoint, device=device, dtype=dtype)
    return HiggsV3LM.from_config(preset_config(spec.preset), device=device, dtype=dtype, seed=RANDOM_SEED)


def load_codec(spec, device: str, dtype: torch.dtype) -> HiggsTokenizerCodec:
    """float32 whatever `dtype`: the snake activations lose precision in bf16 (as SNAC's)."""
    if spec.checkpoint is not None:
        return HiggsTokenizerCodec.from_pretrained(spec.checkpoint, _config(spec).tokenizer, device=device)
    return HiggsTokenizerCodec.from_config(_config(spec).tokenizer, device=device, seed=RANDOM_SEED)


def load_voice_encoder(spec, device: str, dtype: torch.dtype) -> HiggsVoiceEncoder:
    """The tokenizer's encoder on the codec's codebooks, in float32 whatever `dtype` (voice_encoder.py)."""
    cfg, codec = _config(spec).tokenizer, load_codec(spec, device, torch.float32)
    if spec.checkpoint is not None:
        return HiggsVoiceEncoder.from_pretrained(spec.checkpoint, cfg, hubert_config(cfg), codec, device=device)
    return HiggsVoiceEncoder.from_config(cfg, hubert_config(cfg), codec, device=device, seed=RANDOM_SEED)


def preset_voices(spec) -> tuple[str, ...]:
    """The voices of the config (as `HiggsV3LM.voices`)."""
    return tuple(_config(spec).voices)


def codec_left_context_frames(spec) -> int:
    return WINDOWING.left_context_frames


def codec_windowing(spec) -> CodecWindowing:
    """The DAC decoder is not causal: context and lookahead on both sides of a chunk (codec.py)."""
    return WINDOWING
