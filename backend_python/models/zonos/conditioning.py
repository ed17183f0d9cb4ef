"""The prefix conditioner (`prefix_conditioner.*`, the reference's parameter names): each conditioner turns its
input into positions of the prefix (the phonemes: one per id; the others: one each, or their learned
unconditional vector when the input is absent), then one projection and a LayerNorm over the whole prefix."""
from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from .config import ZonosConfig
from .prompt import NUM_PHONEME_IDS


class Conditioner(nn.Module):
    """One condition -> [positions, d_model]; its optional `project` and learned `uncond_vector`."""

    def __init__(self, output_dim: int, spec: dict[str, Any]) -> None:
        super().__init__()
        self.name = spec["name"]
        self.cond_dim = spec.get("cond_dim") or output_dim
        projection = spec.get("projection", "none")
        if projection not in ("none", "linear"):
            raise ValueError(f"conditioner {self.name}: projection {projection!r} is not supported")
        self.project = nn.Linear(self.cond_dim, output_dim) if projection == "linear" else nn.Identity()
        learned = spec.get("uncond_type") == "learned"
        self.uncond_vector = nn.Parameter(torch.zeros(output_dim)) if learned else None

    def apply_cond(self, value: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, value: torch.Tensor | None) -> torch.Tensor:
        if value is None:
            if self.uncond_vector is None:
                raise ValueError(f"conditioner {self.name} needs an input (it has no unconditional vector)")
            return self.uncond_vector[None]
        return self.project(self.apply_cond(value))


class PhonemeConditioner(Conditioner):
    """`EspeakPhonemeConditioner`: ids [L] int64 -> [L, d_model]."""

    def __init__(self, output_dim: int, spec: dict[str, Any]) -> None:
        super().__init__(output_dim, spec)
        self.phoneme_embedder = nn.Embedding(NUM_PHONEME_IDS, output_dim)

    def apply_cond(self, ids: torch.Tensor) -> torch.Tensor:
        return self.phoneme_embedder(ids.to(self.phoneme_embedder.weight.device))


class FourierConditioner(Conditioner):
    """A value in [min_val, max_val] ([input_dim]) -> cos and sin of its random Fourier features [1, d_model]."""

    weight: torch.Tensor

    def __init__(self, output_dim: int, spec: dict[str, Any]) -> None:
        super().__init__(output_dim, spec)
        self.input_dim = spec.get("input_dim", 1)
        self.min_val, self.max_val = spec.get("min_val", 0.0), spec.get("max_val", 1.0)
        self.register_buffer("weight", torch.zeros(output_dim // 2, self.input_dim))  # drawn N(0, std²) at training

    def apply_cond(self, value: torch.Tensor) -> torch.Tensor:
        x = (value.to(self.weight.device).float() - self.min_val) / (self.max_val - self.min_val)
        f = 2 * math.pi * x.to(self.weight.dtype)[None] @ self.weight.T  # [1, d_model / 2]
        return torch.cat((f.cos(), f.sin()), dim=-1)


class IntegerConditioner(Conditioner):
    """An integer in [min_val, max_val] ([1] int64) -> its embedding [1, d_model]."""

    def __init__(self, output_dim: int, spec: dict[str, Any]) -> None:
        super().__init__(output_dim, spec)
        self.min_val = spec.get("min_val", 0)
        self.int_embedder = nn.Embedding(spec.get("max_val", 512) - self.min_val + 1, output_dim)

    def apply_cond(self, value: torch.Tensor) -> torch.Tensor:
        return self.int_embedder(value.to(self.int_embedder.weight.device) - self.min_val)


class PassthroughConditioner(Conditioner):
    """A vector [cond_dim] (the speaker embedding) -> projected [1, d_model]."""

    def apply_cond(self, value: torch.Tensor) -> torch.Tensor:
        if value.shape != (self.cond_dim,):
            raise ValueError(f"conditioner {self.name} takes [{self.cond_dim}], got {list(value.shape)}")
        parameter = next(self.project.parameters(), None)
        return value[None] if parameter is None else value[None].to(parameter.device, parameter.dtype)


CONDITIONERS = {"EspeakPhonemeConditioner": PhonemeConditioner, "FourierConditioner": FourierConditioner,
                "IntegerConditioner": IntegerConditioner, "PassthroughConditioner": PassthroughConditioner}


class PrefixConditioner(nn.Module):
    def __init__(self, config: ZonosConfig, output_dim: int) -> None:
        super().__init__()
        unknown = [c["type"] for c in config.conditioners if c["type"] not in CONDITIONERS]
        if unknown:
            raise ValueError(f"unsupported Zonos conditioners: {unknown}")
        self.conditioners = nn.ModuleList(CONDITIONERS[c["type"]](output_dim, c) for c in config.conditioners)
        self.project = nn.Linear(output_dim, output_dim) if config.projection == "linear" else nn.Identity()
        self.norm = nn.LayerNorm(output_dim)

    @property
    def speaker_dim(self) -> int:
        """The input size of the `speaker` conditioner (128 in the reference)."""
        return next(c.cond_dim for c in self.conditioners if c.name == "speaker")

    def forward(self, values: dict[str, torch.Tensor], is_conditional: bool = True) -> torch.Tensor:
        """values: each conditioner's input by name -> the prefix [positions, d_model]. Unconditional: the
        phonemes alone, every other conditioner its learned vector (a missing input is unconditional too)."""
        first, *rest = self.conditioners
        parts = [first(values[first.name])]
        parts += [c(values.get(c.name) if is_conditional else None) for c in rest]
        dtype = self.norm.weight.dtype
        return self.norm(self.project(torch.cat([p.to(dtype) for p in parts])))
