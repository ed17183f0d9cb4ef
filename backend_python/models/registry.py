"""Model names -> families, checkpoints and loaders.

A `--model` value is a preset name, a local checkpoint directory, or a Hugging
Face id already in the local cache; `families.py` tells its family (torch-free),
and the family's `family.py` loads it. Tiny presets are materialised once as
real checkpoints in the cache directory, so they load through the same
`from_pretrained` code as real weights; full-size presets build random weights
in memory (the cost of a forward pass does not depend on weight values).
"""
from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch
from filelock import FileLock

from backend_python.models import families as family_list
from backend_python.models.base import Codec, CodecWindowing, SpeechLM, VoiceEncoder
from backend_python.models.description import FamilyDescription
from backend_python.models.families import preset_names  # noqa: F401  (a registry name as well)
from backend_python.paths import cache_dir

BUILT_BY = ".built-by"  # in a materialised tiny checkpoint: the fingerprint of the model code that built it
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class ModelSpec:
    """What `--model` resolved to: a checkpoint directory, or a random-weight preset of real shape."""

    name: str
    family: str
    checkpoint: Path | None = None
    preset: str | None = None


class Family(Protocol):
    """What a model family's `family.py` provides to the registry (see qwen3_tts/family.py); its name, presets and
    checkpoint are its description's (`description.py`)."""

    def build_tiny_checkpoint(self, preset: str, out_dir: Path) -> None: ...

    def load_lm(self, spec: ModelSpec, device: str, dtype: torch.dtype) -> SpeechLM: ...

    def load_codec(self, spec: ModelSpec, device: str, dtype: torch.dtype) -> Codec: ...

    def load_voice_encoder(self, spec: ModelSpec, device: str, dtype: torch.dtype) -> VoiceEncoder | None: ...

    def preset_voices(self, spec: ModelSpec) -> tuple[str, ...]: ...  # the LM's `voices`, read without loading it

    def codec_left_context_frames(self, spec: ModelSpec) -> int: ...

    # optional: `codec_windowing(spec) -> CodecWindowing` where the codec needs lookahead (see `codec_windowing`);
    # `codec_model_of(spec) -> str` for a model over another model's codec and voice encoder (see `codec_owner`);
    # `load_refiner(spec, device, dtype)` for a cascade whose chunks are refined before the codec (`load_refiner`)


def resolve(name: str) -> ModelSpec:
    description, checkpoint = family_list.find(name)
    if checkpoint is not None:
        return ModelSpec(name, description.name, checkpoint=checkpoint)
    if name in description.tiny_presets:
        return ModelSpec(name, description.name, checkpoint=_materialise(_loader(description), name))
    return ModelSpec(name, description.name, preset=name)


def _materialise(family: Family, preset: str) -> Path:
    """Build the preset's checkpoint once per version of the model code (a preset whose shape changed is built
    again, not served stale from the cache); concurrent model processes wait on a file lock."""
    target, built_by = cache_dir() / preset, model_code_fingerprint()
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        stamp = target / BUILT_BY
        if not (target / "config.json").exists() or not stamp.is_file() or stamp.read_text() != built_by:
            tmp = Path(tempfile.mkdtemp(prefix=f".{preset}-", dir=target.parent))
            family.build_tiny_checkpoint(preset, tmp)
            (tmp / BUILT_BY).write_text(built_by)
            shutil.rmtree(target, ignore_errors=True)
            tmp.rename(target)
    return target


@functools.cache
def model_code_fingerprint() -> str:
    """A hash of the model code (this package's sources): what a tiny checkpoint's weights and shape follow from."""
    root, digest = Path(__file__).resolve().parent, hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def description_of(spec: ModelSpec) -> FamilyDescription:
    return next(f for f in family_list.FAMILIES if f.name == spec.family)


def family_of(spec: ModelSpec) -> Family:
    return _loader(description_of(spec))


def _loader(description: FamilyDescription) -> Family:
    """The family's `family.py` (torch): the module that loads its models."""
    return importlib.import_module(f"{description.package}.family")


def load_lm(spec: ModelSpec, device: str, dtype: str) -> SpeechLM:
    return family_of(spec).load_lm(spec, device, DTYPES[dtype])


def codec_owner(spec: ModelSpec) -> tuple[Family, ModelSpec]:
    """The family and model whose codec and voice encoder `spec` uses: its own, or, for a family that declares
    `codec_model_of(spec)` (a model over another model's codec: tse), that model's (no family imports another)."""
    family = family_of(spec)
    if hasattr(family, "codec_model_of"):
        owner = resolve(family.codec_model_of(spec))
        return family_of(owner), owner
    return family, spec


def load_codec(spec: ModelSpec, device: str, dtype: str, steps: int = 0) -> Codec:
    """The model's codec; `steps` > 0 sets a flow-matching codec's function evaluations per window (CosyVoice 3's
    Euler steps, FlashTTS's mean-flow evaluations), and is refused by a codec that has none."""
    family, spec = codec_owner(spec)
    if steps:
        if "steps" not in inspect.signature(family.load_codec).parameters:
            raise ValueError(f"codec_steps={steps}: {spec.name}'s codec ({spec.family}) has no flow steps to set")
        return family.load_codec(spec, device, DTYPES[dtype], steps=steps)
    return family.load_codec(spec, device, DTYPES[dtype])


def load_voice_encoder(spec: ModelSpec, device: str, dtype: str) -> VoiceEncoder | None:
    """The model's reference-audio encoder; None where the model cannot clone a voice."""
    family, spec = codec_owner(spec)
    return family.load_voice_encoder(spec, device, DTYPES[dtype])


def load_refiner(spec: ModelSpec, device: str, dtype: str):
    """A cascade's refiners (the refinement lane's model: TontaubeV1's), or None: the family has no refinement
    stage and its chunks go to the codec lanes as they are."""
    family = family_of(spec)
    return family.load_refiner(spec, device, DTYPES[dtype]) if hasattr(family, "load_refiner") else None


def preset_voices(spec: ModelSpec) -> tuple[str, ...]:
    """The model's preset voice names (its LM's `voices`) from its config alone: no weights are loaded."""
    return tuple(family_of(spec).preset_voices(spec))


def codec_windowing(spec: ModelSpec) -> CodecWindowing:
    """How the model's chunks are cut (left context, lookahead, overlap), read without loading its codec: the
    family's `codec_windowing`, else left context alone."""
    family, spec = codec_owner(spec)
    if hasattr(family, "codec_windowing"):
        return family.codec_windowing(spec)
    return CodecWindowing(family.codec_left_context_frames(spec))


def read_json(path: Path) -> dict:
    with open(path) as f:
        return json.load(f)
