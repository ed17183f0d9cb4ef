"""Orpheus (Llama-3B + SNAC 24 kHz) as the registry loads it; its presets, checkpoint and serving plan: description.py.

Checkpoint layout: a transformers Llama checkpoint whose vocabulary holds the Orpheus audio
tokens (canopylabs/orpheus-3b-0.1-ft and its fine-tunes), optionally with the codec in `snac/`;
without it the codec is SNAC 24 kHz from the local Hugging Face cache.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from ..base import CodecWindowing
from . import tiny
from .codec import SNAC_DIR, SNAC_HF_ID, SnacCodec, SnacConfig
from .lm import OrpheusLM
from .presets import full_snac, preset_config
from .prompt import VOICES

RANDOM_SEED = 0


def build_tiny_checkpoint(preset: str, out_dir: Path) -> None:
    tiny.build_tiny_checkpoint(out_dir, seed=RANDOM_SEED)


def load_lm(spec, device: str, dtype: torch.dtype) -> OrpheusLM:
    if spec.checkpoint is not None:
        return OrpheusLM.from_pretrained(spec.checkpoint, device=device, dtype=dtype)
    return OrpheusLM.from_config(preset_config(spec.preset), device=device, dtype=dtype, seed=RANDOM_SEED)


def load_codec(spec, device: str, dtype: torch.dtype) -> SnacCodec:
    """SNAC always runs in float32 (see `SnacCodec.prepare`); `dtype` is the lane's LM dtype."""
    if spec.checkpoint is None:
        return SnacCodec.from_config(full_snac(), device=device, seed=RANDOM_SEED)
    return SnacCodec.from_pretrained(snac_dir(spec.checkpoint), device=device)


def load_voice_encoder(spec, device: str, dtype: torch.dtype) -> None:
    """No voice cloning in this family yet."""
    return None


def preset_voices(spec) -> tuple[str, ...]:
    """The fine-tuned models' speakers (as `OrpheusLM.voices`)."""
    return VOICES


def codec_left_context_frames(spec) -> int:
    if spec.checkpoint is None:
        return full_snac().left_context_frames
    return SnacConfig.from_dict(json.loads((snac_dir(spec.checkpoint) / "config.json").read_text())).left_context_frames


def codec_windowing(spec) -> CodecWindowing:
    """Left context and lookahead of SNAC's non-causal decoder (codec.py says why and what each costs)."""
    cfg = full_snac() if spec.checkpoint is None else SnacConfig.from_dict(
        json.loads((snac_dir(spec.checkpoint) / "config.json").read_text()))
    return CodecWindowing(cfg.left_context_frames, cfg.lookahead_frames)


def snac_dir(checkpoint: Path) -> Path:
    """The checkpoint's own `snac/`, else SNAC 24 kHz from the local Hugging Face cache (no downloads)."""
    if (checkpoint / SNAC_DIR).is_dir():
        return checkpoint / SNAC_DIR
    from huggingface_hub import snapshot_download
    try:
        return Path(snapshot_download(SNAC_HF_ID, local_files_only=True))
    except Exception as exc:
        raise ValueError(f"{checkpoint} has no {SNAC_DIR}/ and {SNAC_HF_ID} is not in the Hugging Face cache "
                         f"(download it once, or copy it to {checkpoint / SNAC_DIR}): {exc}") from None
