"""Zonos-v0.1 (transformer) before it loads: presets, its checkpoint (the official config.json names no
model_type: its backbone and `prefix_conditioner` tell it), its chunk plan and the LM lane's sequence length.

Its non-causal DAC decoder takes 10 frames of lookahead after each chunk, so a first chunk must hold enough audio
to outlast making the next chunk and its lookahead.
"""
from __future__ import annotations

from pathlib import Path

from scheduler.chunking import ChunkingConfig

from ..description import FamilyDescription, config_of
from .config import is_zonos_config


def is_checkpoint(path: Path) -> bool:
    config = config_of(path)
    return config is not None and is_zonos_config(config)


DESCRIPTION = FamilyDescription(
    name="zonos",
    package=__package__,
    tiny_presets=("zonos-tiny",),
    random_presets=("zonos-1.6b",),
    is_checkpoint=is_checkpoint,
    # from a measured sweep on an H200 (BENCHMARKS.md, "Delay-pattern families: Figure 6 and the chunk-plan sweep"):
    # 6, 9, 14, 21, 32, 43 frames. A chunk's audio must outlast making the next one,
    # and a frame is 11.6 ms of audio against an LM step of 5-7 ms under load, so the ramp grows by 1.5, not 2:
    # first chunk and growth 1 / 2 -> 2.0 req/s, 8 / 2 5.3, 4 / 1.25 5.5, 6 / 1.5 5.6, 8 / 1.5 >= 6.0 (TTFA 5 ms
    # more); steady chunk 22 / 43 / 86 frames 5.6 / 5.6 / >= 6.0, within one rate step of each other
    chunk_plan=ChunkingConfig(first_chunk_frames=6, chunk_frames=43, chunk_growth=1.5),
    # 86 frames a second outgrow the repository's 2048 (sized for 12.5-25 Hz): the default 60 s cap is 5168
    # frames, and a streamed-text segment of 300 characters may run to 7543 before its cap ends it
    # (text_segments.SegmentRules): 8192 holds both with its prompt
    max_seq_len=8192,
)
