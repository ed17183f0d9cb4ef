"""Higgs Audio v3 before it loads: presets, its checkpoint (config.json of model_type `higgs_audio` over a `qwen3`
text config) and its chunk plan.

Its non-causal DAC decoder takes 10 frames of lookahead after each chunk, so a first chunk must hold enough audio
to outlast making the next chunk and its lookahead.
"""
from __future__ import annotations

from pathlib import Path

from scheduler.chunking import ChunkingConfig

from ..description import FamilyDescription, config_of
from .config import BACKBONE_TYPE, MODEL_TYPE


def is_checkpoint(path: Path) -> bool:
    config = config_of(path) or {}
    return config.get("model_type") == MODEL_TYPE and (config.get("text_config") or {}).get("model_type") == \
        BACKBONE_TYPE


DESCRIPTION = FamilyDescription(
    name="higgs_v3",
    package=__package__,
    tiny_presets=("higgs-v3-tiny",),
    random_presets=("higgs-v3-4b",),
    is_checkpoint=is_checkpoint,
    # from a measured sweep on an H200 (BENCHMARKS.md, "Delay-pattern families: Figure 6 and the chunk-plan sweep"):
    # 2, 4, 8, 16, 32, 45 frames. Capacity at 90 % (TTFA <= 400 ms, no stall): first chunk 1 / 2 / 3 / 5 frames
    # 5.6 / 14.0 / 13.1 / 10.4 req/s (one frame is 40 ms of audio, gone before the next chunk and its 10 frames of
    # lookahead exist); steady chunk 25 / 45 / 64 frames 9.3 / 14.0 / 12.2 (its non-causal decoder decodes 12 frames
    # of context and 10 of lookahead around every chunk's new ones)
    chunk_plan=ChunkingConfig(first_chunk_frames=2, chunk_frames=45),
)
