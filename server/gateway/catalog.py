"""The models a request may name: each server's own, learned from the server (its `vox_ensemble` config's `model`).

Each served model answers to its ids (`model_ids`). One of them is the default model: the one `--default-model`
names, else the model of the first server the gateway learned (with one model: that model). The default model
also answers to `--model-name` and each `--served-model-name`, listed first, and to OpenAI's model names
(`tts-1`, …); a WebSocket session that names no model speaks it.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from server.gateway.speech import OPENAI_MODELS


@dataclass(frozen=True)
class Catalog:
    # served model (a preset, a checkpoint's path or hub id) -> the ids a request may name it by; the default first
    ids_by_model: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def default_model(self) -> str | None:
        return next(iter(self.ids_by_model), None)

    @property
    def ids(self) -> tuple[str, ...]:
        """Every model's ids, the default model's first (speech.served_models adds OpenAI's names)."""
        return tuple(dict.fromkeys(i for ids in self.ids_by_model.values() for i in ids))

    def model_of(self, model_id: str) -> str | None:
        """The served model a request's `model` means (OpenAI's names: the default model); None: none served."""
        for model, ids in self.ids_by_model.items():
            if model_id in ids:
                return model
        return self.default_model if model_id in OPENAI_MODELS else None


def build_catalog(served: Iterable[str], default: str | None = None, model_name: str | None = None,
                  aliases: tuple[str, ...] = ()) -> Catalog:
    """The catalog of the models `served` (in the order the gateway learned them; repeats are one model);
    `default`: an id of the default model (`--default-model`), else the first served."""
    models = list(dict.fromkeys(served))
    own = {model: model_ids(model, None, ()) for model in models}
    first = next((m for m in models if default in own[m]), models[0] if models else None)
    ids_by_model = {first: model_ids(first, model_name, aliases)} if first is not None else {}
    for model in models:
        ids_by_model.setdefault(model, own[model])
    return Catalog(ids_by_model)


def model_ids(served: str, model_name: str | None, aliases: tuple[str, ...]) -> tuple[str, ...]:
    """The ids a request may name the model by, the first one listed first: `model_name` (else the served
    model's own name), the `--served-model-name` aliases, and the served model's whole id (a checkpoint's path
    or Hugging Face id, e.g. `org/model-1.7b`, beside its last part)."""
    whole = served if not served.startswith(("/", ".")) else None  # a hub id, not a directory on this machine
    ids = (model_name or Path(served).name, *aliases, Path(served).name, whole)
    return tuple(dict.fromkeys(i for i in ids if i))
