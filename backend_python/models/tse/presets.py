"""Named configs: `tse-tiny` for CPU tests (over `qwen3-tts-tiny-base`'s codec and speaker encoder) and
`tse-1.7b`, a Qwen3-1.7B-sized backbone over the 12 Hz codec of `qwen3-tts-1.7b-base` (random weights)."""
from __future__ import annotations

from .config import BackboneConfig, TSEConfig


def tiny() -> TSEConfig:
    """2 Qwen3 layers × 64 (4/2 heads × 16) over the tiny codec's 4 × 64 codes; a 64-d enrollment x-vector."""
    backbone = BackboneConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                              num_key_value_heads=2, head_dim=16)
    return TSEConfig(backbone, num_codebooks=4, codebook_size=64, speaker_dim=64, codec_model="qwen3-tts-tiny-base")


def tse_1_7b() -> TSEConfig:
    """Qwen3-1.7B's shape (28 × 2048, GQA 16/8 × 128, MLP 6144) over the 12 Hz codec's 16 × 2048 codes; the
    1.7B Base's 2048-d x-vector."""
    backbone = BackboneConfig(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16,
                              num_key_value_heads=8, head_dim=128)
    return TSEConfig(backbone, num_codebooks=16, codebook_size=2048, speaker_dim=2048,
                     codec_model="qwen3-tts-1.7b-base")


PRESETS = {"tse-tiny": tiny, "tse-1.7b": tse_1_7b}


def preset_config(name: str) -> TSEConfig:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; known: {sorted(PRESETS)}")
    return PRESETS[name]()
