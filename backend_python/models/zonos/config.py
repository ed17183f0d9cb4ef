"""The Zonos config: the official `config.json` of Zyphra/Zonos-v0.1-transformer, read into one frozen object.

The official file has `backbone` (d_model, n_layer, attn_cfg with num_heads / num_heads_kv, the MLP's
attn_mlp_d_intermediate, LayerNorm epsilon; an empty `ssm_cfg` makes it the transformer variant),
`prefix_conditioner` (the conditioners in prefix order, and the projection after them), and the special code
ids: `eos_token_id` 1024 (codebook 0 ends the speech) and `masked_token_id` 1025 (a delayed codebook before
its first frame or after its end). The codebook count and size are the DAC codec's (9 x 1024); the reference
hard-codes them, so they are not in the file.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..layers.config_checks import check_attention

ROPE_THETA = 10_000.0  # the reference's `precompute_freqs_cis` base (not in config.json)
NUM_CODEBOOKS = 9  # DAC 44 kHz's quantizers
CODEBOOK_SIZE = 1024
EMBEDDING_ROWS = 1026  # the reference's code embeddings: 1024 codes, eos, masked
HEAD_COLUMNS = 1025  # its heads: 1024 codes and eos (masked is never predicted)
PROJECTIONS = ("none", "linear")


@dataclass(frozen=True)
class BackboneShape:
    d_model: int
    n_layer: int
    num_heads: int
    num_heads_kv: int
    attn_mlp_d_intermediate: int
    norm_epsilon: float = 1e-5

    def __post_init__(self) -> None:
        if self.d_model % self.num_heads:
            raise ValueError(f"d_model {self.d_model} not a multiple of num_heads {self.num_heads}")
        check_attention(self.num_heads, self.num_heads_kv, self.head_dim)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "BackboneShape":
        if d.get("ssm_cfg"):
            raise ValueError("only the Zonos transformer variant is supported (this checkpoint has Mamba layers)")
        attn = d.get("attn_cfg") or {}
        if attn.get("qkv_proj_bias") or attn.get("out_proj_bias") or d.get("rms_norm"):
            raise ValueError("only bias-free attention projections and LayerNorm are supported")
        rotary = attn.get("rotary_emb_dim")
        if rotary is not None and rotary != d["d_model"] // attn["num_heads"]:
            raise ValueError(f"rotary_emb_dim {rotary} must be the head dim (the reference rotates it whole)")
        return cls(d["d_model"], d["n_layer"], attn["num_heads"], attn["num_heads_kv"], d["attn_mlp_d_intermediate"],
                   d.get("norm_epsilon", 1e-5))

    def to_dict(self) -> dict[str, Any]:
        attn = {"causal": True, "num_heads": self.num_heads, "num_heads_kv": self.num_heads_kv,
                "rotary_emb_dim": self.head_dim, "qkv_proj_bias": False, "out_proj_bias": False}
        return {"d_model": self.d_model, "d_intermediate": 0, "attn_mlp_d_intermediate": self.attn_mlp_d_intermediate,
                "n_layer": self.n_layer, "ssm_cfg": {}, "attn_layer_idx": list(range(self.n_layer)),
                "attn_cfg": attn, "rms_norm": False, "residual_in_fp32": False, "norm_epsilon": self.norm_epsilon}


def official_conditioners() -> tuple[dict[str, Any], ...]:
    """Zonos-v0.1-transformer's prefix conditioners, in prefix order."""
    return (
        {"type": "EspeakPhonemeConditioner", "name": "espeak"},
        {"type": "PassthroughConditioner", "name": "speaker", "cond_dim": 128, "uncond_type": "learned",
         "projection": "linear"},
        {"type": "FourierConditioner", "name": "emotion", "input_dim": 8, "uncond_type": "learned"},
        {"type": "FourierConditioner", "name": "fmax", "min_val": 0, "max_val": 24000, "uncond_type": "learned"},
        {"type": "FourierConditioner", "name": "pitch_std", "min_val": 0, "max_val": 400, "uncond_type": "learned"},
        {"type": "FourierConditioner", "name": "speaking_rate", "min_val": 0, "max_val": 40,
         "uncond_type": "learned"},
        {"type": "IntegerConditioner", "name": "language_id", "min_val": -1, "max_val": 126,
         "uncond_type": "learned"},
    )


@dataclass(frozen=True)
class ZonosConfig:
    backbone: BackboneShape
    conditioners: tuple[dict[str, Any], ...] = field(default_factory=official_conditioners)
    projection: str = "linear"  # the prefix conditioner's projection after the concatenated conditions
    eos_token_id: int = 1024
    masked_token_id: int = 1025
    pad_vocab_to_multiple_of: int = 8

    def __post_init__(self) -> None:
        if self.projection not in PROJECTIONS:
            raise ValueError(f"prefix projection {self.projection!r} is not supported ({', '.join(PROJECTIONS)})")
        if (self.eos_token_id, self.masked_token_id) != (CODEBOOK_SIZE, CODEBOOK_SIZE + 1):
            raise ValueError("eos_token_id and masked_token_id must be 1024 and 1025 (right after the DAC codes)")
        names = [c.get("name") for c in self.conditioners]
        if not names or names[0] != "espeak" or self.conditioners[0].get("type") != "EspeakPhonemeConditioner":
            raise ValueError("the first prefix conditioner must be the phoneme conditioner `espeak`")
        if any(c.get("uncond_type") != "learned" for c in self.conditioners[1:]):
            raise ValueError("every conditioner but the phonemes needs a learned unconditional vector")

    @property
    def num_codebooks(self) -> int:
        return NUM_CODEBOOKS

    @property
    def codebook_size(self) -> int:
        return CODEBOOK_SIZE

    @property
    def codebook_delays(self) -> tuple[int, ...]:
        """The reference's delay pattern (`codebook_pattern.apply_delay_pattern`): codebook j by j steps."""
        return tuple(range(NUM_CODEBOOKS))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ZonosConfig":
        prefix = d["prefix_conditioner"]
        scalars = {k: d[k] for k in ("eos_token_id", "masked_token_id", "pad_vocab_to_multiple_of") if k in d}
        return cls(BackboneShape.from_dict(d["backbone"]), tuple(dict(c) for c in prefix["conditioners"]),
                   prefix.get("projection", "none"), **scalars)

    @classmethod
    def from_json_file(cls, path: str | Path) -> "ZonosConfig":
        return cls.from_dict(json.loads(Path(path).read_text()))

    def to_dict(self) -> dict[str, Any]:
        """The official layout (the reference's `ZonosConfig.from_dict` reads it)."""
        return {"backbone": self.backbone.to_dict(),
                "prefix_conditioner": {"conditioners": [dict(c) for c in self.conditioners],
                                       "projection": self.projection},
                "eos_token_id": self.eos_token_id, "masked_token_id": self.masked_token_id,
                "pad_vocab_to_multiple_of": self.pad_vocab_to_multiple_of}


def is_zonos_config(d: dict[str, Any]) -> bool:
    """A Zonos transformer config.json: a backbone without Mamba layers and a prefix conditioner."""
    backbone = d.get("backbone")
    return isinstance(backbone, dict) and "prefix_conditioner" in d and not backbone.get("ssm_cfg")
