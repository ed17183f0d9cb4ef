"""Qwen3-TTS (12 Hz) before it loads: presets, its checkpoint, which of its models clone.

Checkpoint layout (the official one): `config.json` (model_type `qwen3_tts`), `model.safetensors`, the text
tokenizer files, and `speech_tokenizer/` holding the 12 Hz codec. Its chunk plan and SM shares are the defaults:
the engine's ramp (2, 4, 8, 10 frames) and the 60/40 split were measured on it.
"""
from __future__ import annotations

from pathlib import Path

from ..description import Cloning, FamilyDescription, config_of
from .config import BASE_MODEL_TYPE

MODEL_TYPE = "qwen3_tts"
CODEC_DIR = "speech_tokenizer"


def is_checkpoint(path: Path) -> bool:
    config = config_of(path)
    return config is not None and (path / CODEC_DIR).is_dir() and config.get("model_type") == MODEL_TYPE


DESCRIPTION = FamilyDescription(
    name="qwen3-tts",
    package=__package__,
    tiny_presets=("qwen3-tts-tiny", "qwen3-tts-tiny-base"),
    random_presets=("qwen3-tts-0.6b", "qwen3-tts-1.7b", "qwen3-tts-0.6b-base", "qwen3-tts-1.7b-base"),
    is_checkpoint=is_checkpoint,
    # a Base model (`tts_model_type` "base") clones, with a speaker encoder and the codec's encoder; a CustomVoice
    # or VoiceDesign model speaks its preset voices only
    clones=Cloning(presets=("qwen3-tts-tiny-base", "qwen3-tts-0.6b-base", "qwen3-tts-1.7b-base"),
                   config_field="tts_model_type", config_value=BASE_MODEL_TYPE),
)
