"""CSM before it loads: presets and its checkpoint (transformers' layout, model_type `csm`). It streams with the
engine's default ramp and SM shares; it clones in context where its model has Mimi's encoder."""
from __future__ import annotations

from pathlib import Path

from ..description import FamilyDescription, config_of

MODEL_TYPE = "csm"


def is_checkpoint(path: Path) -> bool:
    return (config_of(path) or {}).get("model_type") == MODEL_TYPE


DESCRIPTION = FamilyDescription(
    name="csm",
    package=__package__,
    tiny_presets=("csm-tiny",),
    random_presets=("csm-1b",),
    is_checkpoint=is_checkpoint,
)
