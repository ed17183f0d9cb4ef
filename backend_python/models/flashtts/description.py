"""FlashTTS before it loads: presets, its checkpoint (config.json of model_type flashtts, with `codec/`) and its
chunk plan. No voice cloning yet (family.py says why).

Chunks of 18 tokens from the start (no ramp): with the codec's 6 tokens of lookahead the first leaves once 24
tokens exist, then one every 18, as FlashTTS streams. Its DiT attends in blocks of 6 tokens, so chunks that start
and end on that grid match a full decode best (tests/unit/test_flashtts.py); the codec's CUDA graphs are captured
for the windows this plan makes (codec.py `plan_window_lengths`).
"""
from __future__ import annotations

from pathlib import Path

from scheduler.chunking import ChunkingConfig

from ..description import FamilyDescription, config_of

MODEL_TYPE = "flashtts"


def is_checkpoint(path: Path) -> bool:
    return (config_of(path) or {}).get("model_type") == MODEL_TYPE


DESCRIPTION = FamilyDescription(
    name="flashtts",
    package=__package__,
    tiny_presets=("flashtts-tiny",),
    random_presets=("flashtts-0.5b",),
    is_checkpoint=is_checkpoint,
    chunk_plan=ChunkingConfig(first_chunk_frames=18, chunk_frames=18, chunk_growth=None),
    clones=False,
)
