"""Frozen configs for the Qwen3-TTS (12 Hz) LM side, read from / written to the official `config.json`.

The official file nests `talker_config` (with `code_predictor_config` inside it) under the top-level
model config, which also holds the text special-token ids and, for a Base model (`tts_model_type`
"base": voice cloning, no preset voices), `speaker_encoder_config`. The named-speaker ("custom_voice")
and the Base paths are modelled; instructions (voice design) are not.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from protocol.settings import read_settings

from ..layers.config_checks import check_attention

NUM_SPECIAL_CODEC_IDS = 1024  # the top 1024 talker ids are control tokens, never audio codes


@dataclass(frozen=True)
class CodePredictorConfig:
    """The small transformer that predicts codebooks 1..G-1 of a frame."""

    vocab_size: int = 2048  # codes per codebook
    hidden_size: int = 1024
    intermediate_size: int = 3072
    num_hidden_layers: int = 5
    num_attention_heads: int = 16
    num_key_value_heads: int = 8
    head_dim: int = 128
    rope_theta: float = 1_000_000.0
    rms_norm_eps: float = 1e-6
    num_code_groups: int = 16
    max_position_embeddings: int = 65536

    def __post_init__(self) -> None:
        check_attention(self.num_attention_heads, self.num_key_value_heads, self.head_dim)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CodePredictorConfig":
        _check_full_attention(d, "code_predictor_config")
        return read_settings(cls, d, ignore_unknown=True)

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        return {**d, "hidden_act": "silu", "attention_bias": False, "use_sliding_window": False,
                "model_type": "qwen3_tts_talker_code_predictor"}


@dataclass(frozen=True)
class TalkerConfig:
    """The talker: a Qwen3 decoder over summed codec + projected text embeddings."""

    vocab_size: int = 3072  # codebook-0 codes + NUM_SPECIAL_CODEC_IDS control ids
    hidden_size: int = 2048
    intermediate_size: int = 6144
    num_hidden_layers: int = 28
    num_attention_heads: int = 16
    num_key_value_heads: int = 8
    head_dim: int = 128
    rope_theta: float = 1_000_000.0
    rms_norm_eps: float = 1e-6
    mrope_section: tuple[int, ...] = (24, 20, 20)
    mrope_interleaved: bool = True
    text_vocab_size: int = 151936
    text_hidden_size: int = 2048
    num_code_groups: int = 16
    max_position_embeddings: int = 32768
    codec_pad_id: int = 2148
    codec_bos_id: int = 2149
    codec_eos_token_id: int = 2150
    codec_think_id: int = 2154
    codec_nothink_id: int = 2155
    codec_think_bos_id: int = 2156
    codec_think_eos_id: int = 2157
    # name -> talker codec id; spk_is_dialect: name -> False or a dialect key of codec_language_id
    spk_id: dict[str, int] = field(default_factory=dict)
    spk_is_dialect: dict[str, Any] = field(default_factory=dict)
    codec_language_id: dict[str, int] = field(default_factory=dict)
    code_predictor: CodePredictorConfig = field(default_factory=CodePredictorConfig)

    def __post_init__(self) -> None:
        check_attention(self.num_attention_heads, self.num_key_value_heads, self.head_dim)
        if sum(self.mrope_section) != self.head_dim // 2:
            raise ValueError(f"mrope_section {self.mrope_section} must sum to head_dim/2 = {self.head_dim // 2}")
        if self.num_code_groups != self.code_predictor.num_code_groups:
            raise ValueError("talker and code predictor disagree on num_code_groups")
        if self.codebook_size > self.vocab_size - NUM_SPECIAL_CODEC_IDS:
            raise ValueError(f"codebook size {self.codebook_size} overlaps the {NUM_SPECIAL_CODEC_IDS} special ids")
        if not self.codebook_size <= self.codec_eos_token_id < self.vocab_size:
            raise ValueError(f"codec_eos_token_id {self.codec_eos_token_id} must be a special id")

    @property
    def codebook_size(self) -> int:
        return self.code_predictor.vocab_size

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TalkerConfig":
        _check_full_attention(d, "talker_config")
        rope = d.get("rope_scaling") or {}
        kwargs = {k: d[k] for k in cls.__dataclass_fields__ if k in d and k != "code_predictor"}
        kwargs.setdefault("head_dim", d["hidden_size"] // d["num_attention_heads"])
        if "mrope_section" in rope:
            kwargs["mrope_section"] = tuple(rope["mrope_section"])
            kwargs["mrope_interleaved"] = bool(rope.get("interleaved", False))
        kwargs["spk_id"] = {name: _single_id(name, v) for name, v in (d.get("spk_id") or {}).items()}
        kwargs["code_predictor"] = CodePredictorConfig.from_dict(d["code_predictor_config"])
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__
             if k not in ("code_predictor", "mrope_section", "mrope_interleaved")}
        d["rope_scaling"] = {"rope_type": "default", "mrope_section": list(self.mrope_section),
                             "interleaved": self.mrope_interleaved}
        d["code_predictor_config"] = self.code_predictor.to_dict()
        return {**d, "hidden_act": "silu", "attention_bias": False, "use_sliding_window": False,
                "model_type": "qwen3_tts_talker"}


@dataclass(frozen=True)
class SpeakerEncoderConfig:
    """The ECAPA-TDNN speaker encoder of a Base model: a log-mel spectrogram in, an x-vector of `enc_dim`
    (the talker's hidden size: it takes a speaker's place in the prompt) out."""

    mel_dim: int = 128
    enc_dim: int = 1024
    enc_channels: tuple[int, ...] = (512, 512, 512, 512, 1536)
    enc_kernel_sizes: tuple[int, ...] = (5, 3, 3, 3, 1)
    enc_dilations: tuple[int, ...] = (1, 2, 3, 4, 1)
    enc_attention_channels: int = 128
    enc_res2net_scale: int = 8
    enc_se_channels: int = 128
    sample_rate: int = 24000

    def __post_init__(self) -> None:
        for name in ("enc_channels", "enc_kernel_sizes", "enc_dilations"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if not len(self.enc_channels) == len(self.enc_kernel_sizes) == len(self.enc_dilations):
            raise ValueError("enc_channels, enc_kernel_sizes and enc_dilations must have the same length")
        if self.enc_channels[-1] != sum(self.enc_channels[1:-1]):
            raise ValueError(f"enc_channels[-1] must be the SE-Res2Net channels summed: {self.enc_channels}")
        if any(c % self.enc_res2net_scale for c in self.enc_channels[1:-1]):
            raise ValueError(f"the SE-Res2Net channels must split into enc_res2net_scale={self.enc_res2net_scale}")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "SpeakerEncoderConfig":
        return read_settings(cls, d, ignore_unknown=True)

    def to_dict(self) -> dict[str, Any]:
        """No `model_type` key: the reference's config class rejects one."""
        return {k: list(v) if isinstance(v, tuple) else v
                for k, v in ((k, getattr(self, k)) for k in self.__dataclass_fields__)}


def tiny_speaker_encoder_config(enc_dim: int) -> SpeakerEncoderConfig:
    """A few-thousand-parameter ECAPA-TDNN of the real topology (the mel front end is fixed at 128 bands)."""
    return SpeakerEncoderConfig(enc_dim=enc_dim, enc_channels=(16, 16, 16, 16, 48), enc_attention_channels=8,
                                enc_res2net_scale=4, enc_se_channels=8)


BASE_MODEL_TYPE = "base"  # `tts_model_type` of the voice-cloning checkpoints


@dataclass(frozen=True)
class Qwen3TTSConfig:
    """The whole LM side: talker (+ predictor) and the text special-token ids."""

    talker: TalkerConfig = field(default_factory=TalkerConfig)
    im_start_token_id: int = 151644
    im_end_token_id: int = 151645
    tts_pad_token_id: int = 151671
    tts_bos_token_id: int = 151672
    tts_eos_token_id: int = 151673
    tts_model_type: str = "custom_voice"
    tts_model_size: str = "1b7"
    tokenizer_type: str = "qwen3_tts_tokenizer_12hz"
    frame_rate: float = 12.5  # frames per second of the 12 Hz codec
    speaker_encoder: SpeakerEncoderConfig = field(default_factory=SpeakerEncoderConfig)  # used by Base models

    def __post_init__(self) -> None:
        ids = (self.im_start_token_id, self.im_end_token_id, self.tts_pad_token_id,
               self.tts_bos_token_id, self.tts_eos_token_id)
        if max(ids) >= self.talker.text_vocab_size:
            raise ValueError(f"text special ids {ids} exceed text_vocab_size {self.talker.text_vocab_size}")
        if self.is_base and self.speaker_encoder.enc_dim != self.talker.hidden_size:
            raise ValueError(f"speaker embedding size {self.speaker_encoder.enc_dim} != talker hidden size "
                             f"{self.talker.hidden_size}: the x-vector takes a speaker embedding's place")

    @property
    def is_base(self) -> bool:
        """A Base model clones a voice from reference audio and has no preset voices."""
        return self.tts_model_type == BASE_MODEL_TYPE

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Qwen3TTSConfig":
        given = {"talker": TalkerConfig.from_dict(d["talker_config"]), "frame_rate": cls.frame_rate,  # the codec's
                 "speaker_encoder": SpeakerEncoderConfig.from_dict(d.get("speaker_encoder_config") or {})}
        return read_settings(cls, d, given=given, ignore_unknown=True)

    @classmethod
    def from_json_file(cls, path: str | Path) -> "Qwen3TTSConfig":
        return cls.from_dict(json.loads(Path(path).read_text()))

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__
             if k not in ("talker", "frame_rate", "speaker_encoder")}
        return {"architectures": ["Qwen3TTSForConditionalGeneration"], "model_type": "qwen3_tts",
                **d, "talker_config": self.talker.to_dict(), "speaker_encoder_config": self.speaker_encoder.to_dict()}


def _single_id(name: str, value: int | list[int]) -> int:
    """Speaker ids are ints; some configs wrap them in a one-element list (the reference accepts both)."""
    if isinstance(value, list):
        if len(value) != 1:
            raise ValueError(f"speaker {name!r}: expected one codec id, got {value}")
        value = value[0]
    return int(value)


def _check_full_attention(d: dict[str, Any], name: str) -> None:
    if d.get("use_sliding_window"):
        raise ValueError(f"{name}: sliding-window attention is not supported")
    rope = d.get("rope_scaling") or {}
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        raise ValueError(f"{name}: only default RoPE is supported, got {rope}")
