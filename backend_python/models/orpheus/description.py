"""Orpheus before it loads: presets and its checkpoint (a Llama config.json whose vocabulary holds the audio
tokens). It streams with the engine's default ramp and SM shares, and clones no voice (its voices are named in
the prompt)."""
from __future__ import annotations

from pathlib import Path

from ..description import FamilyDescription, config_of
from .tokens import MIN_VOCAB_SIZE

MODEL_TYPE = "llama"


def is_checkpoint(path: Path) -> bool:
    config = config_of(path) or {}
    return config.get("model_type") == MODEL_TYPE and config.get("vocab_size", 0) >= MIN_VOCAB_SIZE


DESCRIPTION = FamilyDescription(
    name="orpheus",
    package=__package__,
    tiny_presets=("orpheus-tiny",),
    random_presets=("orpheus-3b",),
    is_checkpoint=is_checkpoint,
    clones=False,
)
