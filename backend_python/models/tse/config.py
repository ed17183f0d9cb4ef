"""The config of `tse`, the interleaved target-speaker-extraction LM (our own layout: the paper it follows has no
public code or weights): a Qwen3-shaped backbone over one interleaved sequence of input and output frames of the
Qwen3-TTS 12 Hz codec, conditioned on an enrollment speaker embedding."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from protocol.settings import read_settings

from ..layers.config_checks import check_attention

MODEL_TYPE = "voxlane_tse"
BOS, SPEAKER = 0, 1  # the backbone's own ids: the start, and the speaker embedding's position
NUM_SPECIAL_IDS = 2


@dataclass(frozen=True)
class BackboneConfig:
    """Qwen3: GQA, q/k RMSNorm, SwiGLU, RoPE."""

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


@dataclass(frozen=True)
class TSEConfig:
    backbone: BackboneConfig
    num_codebooks: int = 16  # the codec's, in both directions
    codebook_size: int = 2048
    frame_rate: float = 12.5
    chunk_frames: int = 4  # input frames read before each chunk of as many output frames (320 ms at 12.5 Hz)
    speaker_dim: int = 1024  # the enrollment embedding's size (the codec model's speaker encoder)
    codec_model: str = "qwen3-tts-tiny-base"  # whose codec (both directions) and speaker encoder this model uses

    def __post_init__(self) -> None:
        if self.chunk_frames < 1 or self.num_codebooks < 1 or self.codebook_size < 2:
            raise ValueError(f"chunk_frames, num_codebooks and codebook_size must be positive: {self}")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TSEConfig":
        if d.get("model_type") != MODEL_TYPE:
            raise ValueError(f"not a tse config: model_type {d.get('model_type')!r}")
        return read_settings(cls, d, given={"backbone": read_settings(BackboneConfig, d["backbone"])},
                             ignore_unknown=True)

    @classmethod
    def from_dir(cls, path: str | Path) -> "TSEConfig":
        return cls.from_dict(json.loads((Path(path) / "config.json").read_text()))

    def to_dict(self) -> dict[str, Any]:
        return {"model_type": MODEL_TYPE, **asdict(self)}
