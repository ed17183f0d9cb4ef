"""A model family as the launcher, the scheduler and the lanes see it before any model loads: torch-free facts.

Each family states its own in `<family>/description.py` (importing no torch, nothing of its model code but
torch-free configs); `families.py` lists them, one line each. The family's `family.py` (torch) loads the models a
description names and refers to it for these facts. Code outside `models/` that behaves per family reads a field
here, never a family's name.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from scheduler.chunking import ChunkingConfig

CONFIG_FILE = "config.json"


@dataclass(frozen=True)
class Cloning:
    """Which models of a family that clones with some of its models only do, told by name or config alone."""

    presets: tuple[str, ...]  # the presets that clone
    config_field: str  # a checkpoint clones where its config.json sets this field to `config_value`
    config_value: str

    def clones(self, model: str, checkpoint: Path | None) -> bool:
        if checkpoint is None:
            return model in self.presets
        return (config_of(checkpoint) or {}).get(self.config_field) == self.config_value


@dataclass(frozen=True)
class FamilyDescription:
    """One family's name, presets, checkpoint and serving plan (chunks, SM shares, sequence length, lanes)."""

    name: str  # what a resolved model's `ModelSpec.family` says
    package: str  # the family's package: its `family.py` loads the models (torch)
    tiny_presets: tuple[str, ...]  # materialised as checkpoints
    random_presets: tuple[str, ...]  # full shapes, random weights in memory
    # whether a directory holds one of its checkpoints, from its config files (no weights read)
    is_checkpoint: Callable[[Path], bool]
    chunk_plan: ChunkingConfig | None = None  # None: the engine's default ramp (scheduler/chunking.py)
    # MPS active-thread % of (the LM lane, the background codec lane): 60/40 held the SLO for 90 % of requests at
    # 34 req/s on an H200 with qwen3-tts-1.7b where 75/25 held it for 82 % (BENCHMARKS.md, "Engine work")
    sm_shares: tuple[int, int] = (60, 40)
    max_seq_len: int | None = None  # the LM lane's; None: the repository's config.pbtxt keeps its own
    # whether its models clone a voice from reference audio: False none does (the voice encoder lane then answers
    # every reference `reference_unsupported` without importing torch); a `Cloning`: some do, told by name or
    # config; None: told once the model loads (its `load_voice_encoder` returns one or None)
    clones: bool | Cloning | None = None
    # a model that listens while it speaks: a request streams input audio in an audio-in session and sends no text
    # (the router refuses input audio for every other family before any lane is called)
    takes_input_audio: bool = False
    # a cascade: the LM lane writes a first codebook, the refinement lanes (`refiner`, `refiner_urgent`) the others,
    # per chunk, before the codec lanes; the launcher loads those lanes for such a family only
    refines: bool = False

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a family needs a name")
        if set(self.tiny_presets) & set(self.random_presets):
            raise ValueError(f"{self.name}: a preset is tiny or random, not both")
        if not all(1 <= share <= 100 for share in self.sm_shares) or len(self.sm_shares) != 2:
            raise ValueError(f"{self.name}: sm_shares must be two percentages, got {self.sm_shares}")
        if isinstance(self.clones, Cloning) and not set(self.clones.presets) <= set(self.presets):
            raise ValueError(f"{self.name}: cloning presets {self.clones.presets} are not its presets")

    @property
    def presets(self) -> tuple[str, ...]:
        return self.tiny_presets + self.random_presets

    def clones_voices(self, model: str, checkpoint: Path | None) -> bool | None:
        """Whether `model` (a preset, or the checkpoint at `checkpoint`) clones, where that is told without loading
        it; None: not told here."""
        return self.clones.clones(model, checkpoint) if isinstance(self.clones, Cloning) else self.clones


def config_of(path: Path, name: str = CONFIG_FILE) -> dict | None:
    """The JSON object in `path / name`, or None (no such file, not JSON, not an object)."""
    try:
        fields = json.loads((path / name).read_text())
    except (OSError, ValueError):
        return None
    return fields if isinstance(fields, dict) else None
