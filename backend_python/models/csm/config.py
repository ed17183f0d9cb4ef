"""Frozen configs for CSM (Sesame): a Llama backbone and a Llama depth decoder, read from / written
to the official `config.json` of `CsmForConditionalGeneration` (model_type `csm`).

The official file nests `depth_decoder_config` and `codec_config` (Mimi) under the backbone's
fields. Audio ids: `vocab_size` (2051) per codebook = the codec's `codebook_size` (2048) audio
codes + 3 ids above them that are never audio (pad 2050); a frame whose codebooks are all
`codebook_eos_token_id` (0) ends the audio.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from protocol.settings import read_settings

from ..layers.config_checks import check_attention

DEFAULT_THETA = 500_000.0
# transformers writes config.json as a diff against its defaults (`CsmConfig()` = the CSM-1B shape),
# so a real checkpoint may omit any of these
BACKBONE_DEFAULTS = dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                         num_key_value_heads=8)
DEPTH_DECODER_DEFAULTS = dict(hidden_size=1024, intermediate_size=8192, num_hidden_layers=4, num_attention_heads=8,
                              num_key_value_heads=2, backbone_hidden_size=2048)


@dataclass(frozen=True)
class RopeConfig:
    """Default RoPE, or Llama-3 frequency scaling (`rope_type` `llama3`, the Llama-3.2 setting; `CsmConfig()`
    itself defaults to plain RoPE with theta 5e5)."""

    rope_theta: float = DEFAULT_THETA
    rope_type: str = "default"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192

    def __post_init__(self) -> None:
        if self.rope_type not in ("default", "llama3"):
            raise ValueError(f"only default and llama3 RoPE are supported, got {self.rope_type!r}")
        if self.rope_type == "llama3" and self.high_freq_factor <= self.low_freq_factor:
            raise ValueError("llama3 RoPE needs high_freq_factor > low_freq_factor")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RopeConfig":
        """`rope_parameters` (transformers 5), or the older `rope_theta` + `rope_scaling` pair."""
        rope = dict(d.get("rope_parameters") or {**(d.get("rope_scaling") or {}),
                                                  "rope_theta": d.get("rope_theta", DEFAULT_THETA)})
        rope.setdefault("rope_type", rope.pop("type", "default"))
        return read_settings(cls, rope, ignore_unknown=True)

    def to_dict(self) -> dict[str, Any]:
        if self.rope_type == "default":
            return {"rope_theta": self.rope_theta, "rope_type": "default"}
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class LlamaShape:
    """The decoder-stack fields the backbone and the depth decoder share."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-5
    rope: RopeConfig = field(default_factory=RopeConfig)

    def __post_init__(self) -> None:
        check_attention(self.num_attention_heads, self.num_key_value_heads, self.head_dim)

    @classmethod
    def from_dict(cls, d: dict[str, Any], defaults: dict[str, Any]) -> "LlamaShape":
        _check_llama(d)
        d = {**defaults, **{k: v for k, v in d.items() if v is not None}}
        head_dim = d.get("head_dim") or d["hidden_size"] // d["num_attention_heads"]
        kv_heads = d.get("num_key_value_heads") or d["num_attention_heads"]
        return cls(d["hidden_size"], d["intermediate_size"], d["num_hidden_layers"], d["num_attention_heads"],
                   kv_heads, head_dim, d.get("rms_norm_eps", 1e-5), RopeConfig.from_dict(d))

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "rope"}
        return {**d, "rope_parameters": self.rope.to_dict(), "hidden_act": "silu", "attention_bias": False,
                "mlp_bias": False}


@dataclass(frozen=True)
class DepthDecoderConfig:
    """The small transformer that predicts codebooks 1..K-1 of a frame (`depth_decoder_config`)."""

    shape: LlamaShape
    backbone_hidden_size: int
    num_codebooks: int = 32
    vocab_size: int = 2051

    @property
    def max_position_embeddings(self) -> int:
        return self.num_codebooks + 1

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "DepthDecoderConfig":
        return cls(LlamaShape.from_dict(d, DEPTH_DECODER_DEFAULTS),
                   d.get("backbone_hidden_size", DEPTH_DECODER_DEFAULTS["backbone_hidden_size"]),
                   d.get("num_codebooks", 32), d.get("vocab_size", 2051))

    def to_dict(self) -> dict[str, Any]:
        return {**self.shape.to_dict(), "backbone_hidden_size": self.backbone_hidden_size,
                "num_codebooks": self.num_codebooks, "vocab_size": self.vocab_size,
                "max_position_embeddings": self.max_position_embeddings, "model_type": "csm_depth_decoder_model"}


@dataclass(frozen=True)
class CsmConfig:
    """The whole LM side (backbone + depth decoder) and the Mimi `codec_config`, kept as a dict."""

    backbone: LlamaShape
    depth_decoder: DepthDecoderConfig
    codec: dict[str, Any]  # the official `codec_config` (MimiConfig fields)
    num_codebooks: int = 32
    vocab_size: int = 2051
    text_vocab_size: int = 128256
    max_position_embeddings: int = 2048
    codebook_eos_token_id: int = 0
    codebook_pad_token_id: int = 2050
    bos_token_id: int = 128000
    pad_token_id: int = 128002
    audio_token_id: int = 128002
    audio_eos_token_id: int = 128003
    tie_codebooks_embeddings: bool = True
    speakers: tuple[str, ...] = ("0", "1")  # voices (not in config.json): the prompt is "[{speaker}]{text}"

    def __post_init__(self) -> None:
        d = self.depth_decoder
        if (d.num_codebooks, d.vocab_size) != (self.num_codebooks, self.vocab_size):
            raise ValueError("backbone and depth decoder disagree on num_codebooks / vocab_size")
        if d.backbone_hidden_size != self.backbone.hidden_size:
            raise ValueError("depth decoder backbone_hidden_size != backbone hidden_size")
        if self.codebook_size > self.vocab_size or self.codec.get("num_quantizers", 32) != self.num_codebooks:
            raise ValueError(f"codec ({self.codebook_size} codes, {self.codec.get('num_quantizers')} quantizers) "
                             f"does not fit vocab_size {self.vocab_size} / num_codebooks {self.num_codebooks}")
        if not 0 <= self.codebook_eos_token_id < self.codebook_size:
            raise ValueError(f"codebook_eos_token_id {self.codebook_eos_token_id} must be an audio code")

    @property
    def codebook_size(self) -> int:
        """Audio codes per codebook (the codec's); ids from here to vocab_size are never sampled."""
        return int(self.codec.get("codebook_size", 2048))

    @property
    def frame_rate(self) -> float:
        return float(self.codec.get("frame_rate") or self.codec.get("_frame_rate") or 12.5)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CsmConfig":
        given = {"backbone": LlamaShape.from_dict(d, BACKBONE_DEFAULTS),
                 "depth_decoder": DepthDecoderConfig.from_dict(d.get("depth_decoder_config") or {}),
                 "codec": dict(d.get("codec_config") or {})}
        return read_settings(cls, d, given=given, ignore_unknown=True)

    @classmethod
    def from_json_file(cls, path: str | Path) -> "CsmConfig":
        return cls.from_dict(json.loads(Path(path).read_text()))

    def to_dict(self) -> dict[str, Any]:
        skip = ("backbone", "depth_decoder", "codec", "speakers")
        scalars = {k: getattr(self, k) for k in self.__dataclass_fields__ if k not in skip}
        return {"architectures": ["CsmForConditionalGeneration"], "model_type": "csm", **self.backbone.to_dict(),
                **scalars, "depth_decoder_config": self.depth_decoder.to_dict(),
                "codec_config": self.codec}


def _check_llama(d: dict[str, Any]) -> None:
    if d.get("hidden_act", "silu") != "silu" or d.get("attention_bias") or d.get("mlp_bias"):
        raise ValueError("only bias-free SiLU Llama layers are supported")
