"""Voxtral-TTS before it loads: presets and its checkpoint (Mistral's `params.json` with an acoustic transformer in
`multimodal.audio_model_args`). It streams with the engine's default ramp and SM shares, and clones no voice (the
public checkpoint has no codec encoder)."""
from __future__ import annotations

from pathlib import Path

from ..description import FamilyDescription, config_of
from .config import MODEL_TYPE, PARAMS_FILE


def is_checkpoint(path: Path) -> bool:
    params = config_of(path, PARAMS_FILE)
    if params is None:
        return False
    audio = (params.get("multimodal") or {}).get("audio_model_args") or {}
    return params.get("model_type", MODEL_TYPE) == MODEL_TYPE and "acoustic_transformer_args" in audio


DESCRIPTION = FamilyDescription(
    name="voxtral",
    package=__package__,
    tiny_presets=("voxtral-tiny",),
    random_presets=("voxtral-4b",),
    is_checkpoint=is_checkpoint,
    clones=False,
)
