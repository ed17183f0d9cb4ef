"""Zonos-v0.1 (transformer variant) as the registry loads it; its presets, checkpoint and serving plan: description.py.

Checkpoint layout: checkpoint.py (the official `config.json` + `model.safetensors`, optionally our
`voices.safetensors` and `dac/`).
"""
from __future__ import annotations

from pathlib import Path

import torch

from ..base import CodecWindowing
from . import tiny
from .checkpoint import dac_dir, read_speaker_model, read_voices, speaker_dir
from .codec import LEFT_CONTEXT_FRAMES, LOOKAHEAD_FRAMES, DacCodec
from .lm import ZonosLM
from .presets import preset_config, random_voices
from .prompt import DEFAULT_VOICE
from .speaker import random_speaker_model
from .voice_encoder import ZonosVoiceEncoder

RANDOM_SEED = 0


def build_tiny_checkpoint(preset: str, out_dir: Path) -> None:
    tiny.build_tiny_checkpoint(out_dir, seed=RANDOM_SEED)


def load_lm(spec, device: str, dtype: torch.dtype) -> ZonosLM:
    """A checkpoint without a speaker model (none in it, none cached) takes no reference audio."""
    if spec.checkpoint is not None:
        lm = ZonosLM.from_pretrained(spec.checkpoint, device=device, dtype=dtype)
        lm.supports_reference = speaker_dir(spec.checkpoint) is not None
        return lm
    return ZonosLM.from_config(preset_config(spec.preset).lm, random_voices(RANDOM_SEED), device=device, dtype=dtype,
                               seed=RANDOM_SEED)


def load_codec(spec, device: str, dtype: torch.dtype) -> DacCodec:
    """DAC always runs in float32; `dtype` is the lane's LM dtype."""
    if spec.checkpoint is None:
        return DacCodec.from_config(preset_config(spec.preset).dac, device=device, seed=RANDOM_SEED)
    return DacCodec.from_pretrained(dac_dir(spec.checkpoint), device=device)


def load_voice_encoder(spec, device: str, dtype: torch.dtype) -> ZonosVoiceEncoder | None:
    """The speaker model (speaker.py) in float32 whatever `dtype`; None where the checkpoint has none."""
    if spec.checkpoint is None:
        return ZonosVoiceEncoder(random_speaker_model(preset_config(spec.preset).speaker, RANDOM_SEED).to(device))
    path = speaker_dir(spec.checkpoint)
    return None if path is None else ZonosVoiceEncoder(read_speaker_model(path).to(device))


def preset_voices(spec) -> tuple[str, ...]:
    """The default (unconditional) voice, then the checkpoint's or the preset's (as `ZonosLM.voices`)."""
    voices = read_voices(spec.checkpoint) if spec.checkpoint is not None else random_voices(RANDOM_SEED)
    return (DEFAULT_VOICE, *voices)


def codec_left_context_frames(spec) -> int:
    return LEFT_CONTEXT_FRAMES


def codec_windowing(spec) -> CodecWindowing:
    """Left context and lookahead of DAC's non-causal decoder (codec.py says why)."""
    return CodecWindowing(LEFT_CONTEXT_FRAMES, LOOKAHEAD_FRAMES)
