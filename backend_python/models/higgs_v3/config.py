"""Frozen configs for Higgs Audio v3: a Qwen3 backbone with Higgs's fused multi-codebook audio embedding and
head, and the Higgs audio tokenizer (the codec), read from / written to the checkpoint's `config.json` files.

The LM's `config.json` follows Boson AI's `HiggsAudioConfig` (model_type `higgs_audio`, the backbone under
`text_config`, here a `qwen3` one) and the tokenizer's `audio_tokenizer/config.json` the official
`HiggsAudioTokenizer` keyword arguments (`D`, `ratios`, `bins`, `n_q`, `codebook_dim`, ...). Audio ids per
codebook: `codebook_size` (1024) codes, then the stream's begin (1024) and end (1025): the head has
`codebook_size + 2` logits per codebook.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from protocol.settings import read_settings

from ..layers.config_checks import check_attention

MODEL_TYPE = "higgs_audio"
BACKBONE_TYPE = "qwen3"


@dataclass(frozen=True)
class BackboneConfig:
    """The Qwen3 decoder stack (`text_config`): q/k RMSNorm, GQA, default RoPE."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0

    def __post_init__(self) -> None:
        check_attention(self.num_attention_heads, self.num_key_value_heads, self.head_dim)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "BackboneConfig":
        if d.get("model_type", BACKBONE_TYPE) != BACKBONE_TYPE:
            raise ValueError(f"Higgs Audio v3 has a qwen3 backbone, got text_config model_type {d['model_type']!r}")
        rope = d.get("rope_parameters") or {}
        head_dim = d.get("head_dim") or d["hidden_size"] // d["num_attention_heads"]
        return cls(d["vocab_size"], d["hidden_size"], d["intermediate_size"], d["num_hidden_layers"],
                   d["num_attention_heads"], d.get("num_key_value_heads") or d["num_attention_heads"], head_dim,
                   d.get("rms_norm_eps", 1e-6), rope.get("rope_theta", d.get("rope_theta", 1_000_000.0)))

    def to_dict(self) -> dict[str, Any]:
        return {"model_type": BACKBONE_TYPE, **{k: getattr(self, k) for k in self.__dataclass_fields__},
                "hidden_act": "silu", "attention_bias": False, "tie_word_embeddings": False}


@dataclass(frozen=True)
class AudioTokenizerConfig:
    """The Higgs audio tokenizer (xcodec-style): a DAC encoder and decoder around an RVQ of `n_q` codebooks of
    `bins` codes, with a semantic (HuBERT) branch that only the encoder runs. The decoder reads the quantized
    latent (`D` acoustic + `semantic_dim` semantic channels) through `fc_post2` into a DAC decoder of
    `decoder_dim` channels that upsamples by `ratios` (hop = their product) and has no final tanh.
    `decoder_dim`, `encoder_dim` and `semantic_dim` are fixed in the reference (1024, 64, 768 for its HuBERT)."""

    D: int = 256
    ratios: tuple[int, ...] = (8, 5, 4, 2, 3)
    sample_rate: int = 24000
    bins: int = 1024
    n_q: int = 8
    codebook_dim: int = 64
    decoder_dim: int = 1024
    encoder_dim: int = 64
    semantic_dim: int = 768
    extra: dict[str, Any] = field(default_factory=dict)  # the official fields we do not read, kept for writing

    def __post_init__(self) -> None:
        if self.sample_rate % self.hop_length:
            raise ValueError(f"sample_rate {self.sample_rate} is not a multiple of the hop {self.hop_length}")
        if self.decoder_dim % 2 ** len(self.ratios):
            raise ValueError(f"decoder_dim {self.decoder_dim} must halve {len(self.ratios)} times")

    @property
    def hop_length(self) -> int:
        hop = 1
        for ratio in self.ratios:
            hop *= ratio
        return hop

    @property
    def frame_rate(self) -> float:
        return self.sample_rate / self.hop_length

    @property
    def quantizer_dim(self) -> int:
        """The RVQ's dimension: acoustic and semantic latents concatenated (vq_scale 1)."""
        return self.D + self.semantic_dim

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "AudioTokenizerConfig":
        if d.get("vq_scale", 1) != 1 or not isinstance(d.get("bins", 1024), int):
            raise ValueError("only the RVQ tokenizer with vq_scale 1 is supported")
        extra = {k: v for k, v in d.items() if k not in cls.__dataclass_fields__ and k != "vq_scale"}
        return read_settings(cls, d, given={"extra": extra}, ignore_unknown=True)

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "extra"}
        return {**self.extra, **d, "ratios": list(self.ratios), "vq_scale": 1}


@dataclass(frozen=True)
class HiggsV3Config:
    """The LM side (`HiggsAudioConfig` fields we read) and the audio tokenizer's config."""

    backbone: BackboneConfig
    tokenizer: AudioTokenizerConfig
    audio_num_codebooks: int = 8
    audio_codebook_size: int = 1024
    audio_stream_bos_id: int = 1024
    audio_stream_eos_id: int = 1025
    # special tokens, looked up in the text tokenizer by name (as the reference's `set_audio_special_tokens`)
    audio_out_bos_token: str = "<|audio_out_bos|>"
    audio_eos_token: str = "<|audio_eos|>"
    # preset voices: name -> transcript of its reference audio (the codes are in voices.safetensors)
    voices: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        size, t = self.audio_codebook_size, self.tokenizer
        if (self.audio_num_codebooks, size) != (t.n_q, t.bins):
            raise ValueError(f"LM ({self.audio_num_codebooks} codebooks of {size}) and audio tokenizer "
                             f"({t.n_q} of {t.bins}) disagree")
        if sorted((self.audio_stream_bos_id, self.audio_stream_eos_id)) != [size, size + 1]:
            raise ValueError(f"stream bos/eos must be ids {size} and {size + 1}")

    @property
    def audio_vocab_size(self) -> int:
        """Ids per codebook in the embedding and the head: the codes, begin and end of stream."""
        return self.audio_codebook_size + 2

    @property
    def codebook_delays(self) -> tuple[int, ...]:
        """MusicGen's delay pattern (`use_delay_pattern`): codebook j one step behind codebook j - 1."""
        return tuple(range(self.audio_num_codebooks))

    @property
    def frame_rate(self) -> float:
        return self.tokenizer.frame_rate

    @classmethod
    def from_dict(cls, d: dict[str, Any], tokenizer: dict[str, Any]) -> "HiggsV3Config":
        if d.get("model_type") != MODEL_TYPE:
            raise ValueError(f"not a Higgs Audio config: model_type {d.get('model_type')!r}")
        if not d.get("use_delay_pattern", True) or d.get("audio_adapter_type", "stack") != "stack":
            raise ValueError("Higgs Audio v3 needs use_delay_pattern and the stack adapter (no DualFFN)")
        if d.get("audio_embed_avg") or d.get("use_audio_out_embed_projector"):
            raise ValueError("audio_embed_avg and use_audio_out_embed_projector are not supported")
        given = {"backbone": BackboneConfig.from_dict(d["text_config"]),
                 "tokenizer": AudioTokenizerConfig.from_dict(tokenizer)}
        return read_settings(cls, d, given=given, ignore_unknown=True)

    @classmethod
    def from_dir(cls, path: str | Path, tokenizer_dir: str = "audio_tokenizer") -> "HiggsV3Config":
        path = Path(path)
        return cls.from_dict(json.loads((path / "config.json").read_text()),
                             json.loads((path / tokenizer_dir / "config.json").read_text()))

    def to_dict(self) -> dict[str, Any]:
        scalars = {k: getattr(self, k) for k in self.__dataclass_fields__ if k not in ("backbone", "tokenizer")}
        return {"architectures": ["HiggsAudioModel"], "model_type": MODEL_TYPE, "text_config": self.backbone.to_dict(),
                "audio_adapter_type": "stack", "use_delay_pattern": True, "skip_audio_tower": True,
                "encode_whisper_embed": False, "encode_audio_in_tokens": False, "audio_embed_avg": False, **scalars}
