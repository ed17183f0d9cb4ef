"""CSM-1B as the registry loads it; its presets, checkpoint and serving plan: description.py.

Checkpoint layout (the official transformers one, e.g. `sesame/csm-1b`): `config.json` (model_type
`csm`), `model.safetensors` (LM at the root, Mimi under `codec_model.*`) and the tokenizer files.
"""
from __future__ import annotations

from pathlib import Path

import torch

from . import tiny
from .codec import LEFT_CONTEXT_FRAMES, MimiCodec
from .lm import CsmLM
from .presets import preset_config
from .voice_encoder import CsmVoiceEncoder

RANDOM_SEED = 0


def build_tiny_checkpoint(preset: str, out_dir: Path) -> None:
    tiny.build_tiny_checkpoint(out_dir, seed=RANDOM_SEED)


def load_lm(spec, device: str, dtype: torch.dtype) -> CsmLM:
    if spec.checkpoint is not None:
        return CsmLM.from_pretrained(spec.checkpoint, device=device, dtype=dtype)
    return CsmLM.from_config(preset_config(spec.preset), device=device, dtype=dtype, seed=RANDOM_SEED)


def load_codec(spec, device: str, dtype: torch.dtype) -> MimiCodec:
    if spec.checkpoint is not None:
        from .checkpoint import read_config
        return MimiCodec.from_pretrained(spec.checkpoint, read_config(spec.checkpoint).codec, device=device,
                                         dtype=dtype)
    return MimiCodec.from_config(preset_config(spec.preset).codec, device=device, dtype=dtype, seed=RANDOM_SEED)


def load_voice_encoder(spec, device: str, dtype: torch.dtype) -> CsmVoiceEncoder:
    """Mimi's encoder on the codec's weights (loaded as `load_codec` loads them), in float32 whatever `dtype`:
    a frame's codes must not depend on it."""
    return CsmVoiceEncoder(load_codec(spec, device, torch.float32))


def preset_voices(spec) -> tuple[str, ...]:
    """The speakers of the config (as `CsmLM.voices`)."""
    from .checkpoint import read_config
    config = read_config(spec.checkpoint) if spec.checkpoint is not None else preset_config(spec.preset)
    return tuple(config.speakers)


def codec_left_context_frames(spec) -> int:
    return LEFT_CONTEXT_FRAMES
