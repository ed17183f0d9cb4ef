"""CosyVoice 3 before it loads: presets, its checkpoints, its chunk plan and SM shares.

Checkpoints: ours (config.json of model_type cosyvoice3, with `codec/` and `campplus/`) or an official
Fun-CosyVoice3-0.5B directory (cosyvoice3.yaml, llm.pt, flow.pt, hift.pt, …; checkpoint.py reads both).

Its flow-matching codec pays for every window with its left context and lookahead: a window holds 32 tokens of
context and 4 of lookahead around its new ones, so a 25-token chunk (CosyVoice's own token hop) costs 2.4x its
frames where a 10-token one costs 4.6x. Its LM steps in 2 ms and needs 25 tokens a second per stream, while its
codec runs a 22-layer DiT 10 times (twice over, for the guidance) per window, so the codec lane takes the larger
SM share.
"""
from __future__ import annotations

from pathlib import Path

from scheduler.chunking import ChunkingConfig

from ..description import FamilyDescription, config_of

MODEL_TYPE = "cosyvoice3"
OFFICIAL_YAML = "cosyvoice3.yaml"
OFFICIAL_LLM = "llm.pt"


def is_ours(path: Path) -> bool:
    return (config_of(path) or {}).get("model_type") == MODEL_TYPE


def is_official(path: Path) -> bool:
    return (path / OFFICIAL_YAML).is_file() and (path / OFFICIAL_LLM).is_file()


def is_checkpoint(path: Path) -> bool:
    return is_ours(path) or is_official(path)


DESCRIPTION = FamilyDescription(
    name="cosyvoice3",
    package=__package__,
    tiny_presets=("cosyvoice3-tiny",),
    random_presets=("cosyvoice3-0.5b",),
    is_checkpoint=is_checkpoint,
    # 4, 8, 16, 25: a window costs about the same from 12 tokens to 61 (BENCHMARKS.md, "Flow-matching
    # families"), so a 2-token first chunk buys 4 ms of time to first audio for a call that plays 80 ms
    chunk_plan=ChunkingConfig(first_chunk_frames=4, chunk_frames=25),
    sm_shares=(40, 60),
)
