"""TontaubeV1 before it loads: presets, its checkpoint (the official bundle: one folder a codebook, `cb0/` …),
its chunk plan, and its refinement lanes (a cascade: the LM lane writes the semantic codebook, three refiners the
others, per chunk, before the codec lanes)."""
from __future__ import annotations

from pathlib import Path

from scheduler.chunking import ChunkingConfig

from ..description import FamilyDescription, config_of
from .config import NUM_CODEBOOKS

FOLDERS = tuple(f"cb{k}" for k in range(NUM_CODEBOOKS))  # the bundle's models, one a codebook


def is_checkpoint(path: Path) -> bool:
    return "audio_token_start_id" in (config_of(path / FOLDERS[0]) or {})


DESCRIPTION = FamilyDescription(
    name="tontaube",
    package=__package__,
    tiny_presets=("tontaube-tiny",),
    random_presets=("tontaube-2.9b",),
    is_checkpoint=is_checkpoint,
    # DualCodec's non-causal decoder takes 5 frames of lookahead after each chunk, and the refiners re-read a
    # stream's semantic codes for every chunk: 5 frames first (0.4 s, the reference's quantum), then 25. Every
    # chunk ends on the 5-frame grid (5, 10, 20, then 25: growth 2 from 5, capped at 25), where VibeVoice's 7.5 Hz
    # frames meet DualCodec's (3 to 5), so the re-synthesis needs no audio past a chunk's own frames (codec.py); a
    # plan whose sizes leave the grid decodes near the full stream, not equal to it
    chunk_plan=ChunkingConfig(first_chunk_frames=5, chunk_frames=25, chunk_growth=2.0),
    refines=True,
)
