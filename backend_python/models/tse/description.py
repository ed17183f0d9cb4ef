"""Target-speaker extraction before it loads: presets and its checkpoint (config.json of model_type
`voxlane_tse`). It listens while it speaks: a request streams input audio in an audio-in session, with the target
speaker's enrollment as its reference, and sends no text. Its codec and voice encoder are those of the model its
config names (family.py)."""
from __future__ import annotations

from pathlib import Path

from ..description import FamilyDescription, config_of
from .config import MODEL_TYPE


def is_checkpoint(path: Path) -> bool:
    return (config_of(path) or {}).get("model_type") == MODEL_TYPE


DESCRIPTION = FamilyDescription(
    name="tse",
    package=__package__,
    tiny_presets=("tse-tiny",),
    random_presets=("tse-1.7b",),
    is_checkpoint=is_checkpoint,
    takes_input_audio=True,
)
