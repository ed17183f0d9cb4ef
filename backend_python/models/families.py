"""Every model family, one line each, and the family a `--model` value names: torch-free, so the launcher, the
scheduler's callers and the lanes read it without loading the model stack. The registry (`registry.py`) loads
models from the same list.

A `--model` value is a preset name (`qwen3-tts-tiny`, …), a local checkpoint directory, or a Hugging Face id
already in the local cache. Checkpoints are told apart by each family's `is_checkpoint`, in the order below.
"""
from __future__ import annotations

from importlib import import_module
from pathlib import Path

from backend_python.models.description import FamilyDescription

DEFAULT_MODEL = "qwen3-tts-tiny"
# a model whose family is not told before it loads (a name no family knows): every default, and the lanes say more
def _never(path: Path) -> bool:
    return False


UNTOLD = FamilyDescription(name="untold", package="", tiny_presets=(), random_presets=(), is_checkpoint=_never)


def _description(package: str) -> FamilyDescription:
    return import_module(f"{__package__}.{package}.description").DESCRIPTION


FAMILIES: tuple[FamilyDescription, ...] = tuple(_description(package) for package in (
    "qwen3_tts",
    "csm",
    "orpheus",
    "cosyvoice3",
    "flashtts",
    "higgs_v3",
    "zonos",
    "voxtral",
    "tse",
    "tontaube",
))


def preset_names() -> list[str]:
    return [preset for family in FAMILIES for preset in family.presets]


def find(model: str) -> tuple[FamilyDescription, Path | None]:
    """The family of `model` and its checkpoint directory (None: a preset). Raises ValueError for a model that is
    neither a preset nor a checkpoint of a family here."""
    for family in FAMILIES:
        if model in family.presets:
            return family, None
    path = local_path(model)
    for family in FAMILIES:
        if family.is_checkpoint(path):
            return family, path
    raise ValueError(f"unknown model {model!r}: not a preset ({', '.join(preset_names())}) and not a "
                     f"checkpoint directory of a supported family")


def describe(model: str) -> FamilyDescription:
    """The description of `model`'s family, or `UNTOLD` where no family claims it (the lane that loads it fails)."""
    try:
        return find(model)[0]
    except ValueError:
        return UNTOLD


def clones_voices(model: str) -> bool | None:
    """Whether `model` has a voice encoder, where its name or config tells (FamilyDescription.clones); None: not told
    here, the voice encoder lane loads the model and finds out."""
    try:
        family, checkpoint = find(model)
    except ValueError:
        return None
    return family.clones_voices(model, checkpoint)


def local_path(name: str) -> Path:
    """The directory `name` names: a path, or a Hugging Face id already cached (no downloads at serve time)."""
    path = Path(name).expanduser()
    if path.is_dir() or "/" not in name or name.startswith((".", "/", "~")):
        return path
    try:
        from huggingface_hub import snapshot_download
        return Path(snapshot_download(name, local_files_only=True))
    except Exception as exc:
        raise ValueError(f"model {name!r} is neither a directory nor a cached Hugging Face repo: {exc}") from None
