"""Frozen config of the Orpheus backbone, read from / written to a transformers Llama `config.json`.

Both spellings of RoPE settings are read: transformers 4 (`rope_theta` + `rope_scaling`) and 5
(`rope_parameters` holding both); we write the transformers 5 form. Only default and `llama3` RoPE
are modelled (Orpheus is a Llama-3.2-3B fine-tune, which uses `llama3`).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..layers.config_checks import check_attention
from ..rope import llama3_scaled
from .description import MODEL_TYPE
from .tokens import MIN_VOCAB_SIZE



@dataclass(frozen=True)
class Llama3Rope:
    """`rope_type: llama3` frequency scaling (Llama 3.1+): long wavelengths slowed by `factor`."""

    factor: float = 32.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192

    def __post_init__(self) -> None:
        if not (self.factor > 0 and self.high_freq_factor > self.low_freq_factor > 0):
            raise ValueError(f"invalid llama3 RoPE scaling {self}")

    def scale(self, inv_freq: torch.Tensor) -> torch.Tensor:
        """inv_freq: [head_dim / 2] float32 -> the scaled frequencies (transformers' llama3 rule)."""
        return llama3_scaled(inv_freq, self.factor, self.low_freq_factor, self.high_freq_factor,
                             self.original_max_position_embeddings)


@dataclass(frozen=True)
class OrpheusConfig:
    """The Llama fields our backbone uses. Defaults: the Orpheus 3B shape (Llama-3.2-3B + audio tokens)."""

    vocab_size: int = 156940
    hidden_size: int = 3072
    intermediate_size: int = 8192
    num_hidden_layers: int = 28
    num_attention_heads: int = 24
    num_key_value_heads: int = 8
    head_dim: int = 128
    rms_norm_eps: float = 1e-5
    rope_theta: float = 500000.0
    rope_scaling: Llama3Rope | None = field(default_factory=Llama3Rope)
    max_position_embeddings: int = 131072
    tie_word_embeddings: bool = True
    bos_token_id: int = 128000
    eos_token_id: int = 128009

    def __post_init__(self) -> None:
        if self.vocab_size < MIN_VOCAB_SIZE:
            raise ValueError(f"vocab_size {self.vocab_size} lacks the audio tokens (need >= {MIN_VOCAB_SIZE})")
        check_attention(self.num_attention_heads, self.num_key_value_heads, self.head_dim)

    def inv_freq(self, device: torch.device | str = "cpu") -> torch.Tensor:
        """RoPE frequencies [head_dim / 2] float32, scaled when the config says so."""
        exponents = torch.arange(0, self.head_dim, 2, device=device, dtype=torch.int64).float() / self.head_dim
        inv_freq = 1.0 / (self.rope_theta ** exponents)
        return inv_freq if self.rope_scaling is None else self.rope_scaling.scale(inv_freq)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "OrpheusConfig":
        _check_llama(d)
        rope = dict(d.get("rope_parameters") or d.get("rope_scaling") or {})
        theta = rope.pop("rope_theta", d.get("rope_theta", 500000.0))
        kwargs = {k: d[k] for k in cls.__dataclass_fields__ if k in d and k not in ("rope_theta", "rope_scaling")}
        kwargs.setdefault("head_dim", d["hidden_size"] // d["num_attention_heads"])
        return cls(**kwargs, rope_theta=float(theta), rope_scaling=_rope_scaling(rope))

    @classmethod
    def from_json_file(cls, path: str | Path) -> "OrpheusConfig":
        return cls.from_dict(json.loads(Path(path).read_text()))

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k not in ("rope_theta", "rope_scaling")}
        rope = {"rope_type": "default"} if self.rope_scaling is None else {
            "rope_type": "llama3", **asdict(self.rope_scaling)}
        return {"architectures": ["LlamaForCausalLM"], "model_type": MODEL_TYPE, **d, "hidden_act": "silu",
                "attention_bias": False, "mlp_bias": False, "rope_parameters": {**rope, "rope_theta": self.rope_theta}}


def _rope_scaling(rope: dict[str, Any]) -> Llama3Rope | None:
    kind = rope.pop("rope_type", rope.pop("type", "default"))
    if kind == "default":
        return None
    if kind != "llama3":
        raise ValueError(f"only default and llama3 RoPE are supported, got {kind!r}")
    return Llama3Rope(**{k: rope[k] for k in Llama3Rope.__dataclass_fields__ if k in rope})


def _check_llama(d: dict[str, Any]) -> None:
    if d.get("model_type") != MODEL_TYPE:
        raise ValueError(f"not a Llama config: model_type {d.get('model_type')!r}")
    if d.get("hidden_act", "silu") != "silu" or d.get("attention_bias") or d.get("mlp_bias"):
        raise ValueError("only bias-free SiLU Llama layers are supported")
