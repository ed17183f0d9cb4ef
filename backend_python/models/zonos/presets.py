"""Named configs: a tiny one for CPU tests and the full Zonos-v0.1-transformer shape (random weights), each with
its DAC codec config and its random preset voices (the checkpoint builder is `tiny.py`)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .config import BackboneShape, ZonosConfig
from .prompt import SPEAKER_DIM
from .speaker import SpeakerConfig

PRESET_VOICES = ("amber", "basil")  # random speaker embeddings; "default" (unconditional) comes first


@dataclass(frozen=True)
class Preset:
    lm: ZonosConfig
    dac: dict  # DacConfig fields
    speaker: SpeakerConfig  # the speaker model that clones a voice


def tiny_dac() -> dict:
    """The real DAC 44 kHz topology (9 x 1024 codes, rates 8·8·4·2, hop 512) at a few channels (~0.1 M parameters
    in the decoder and quantizer)."""
    return dict(encoder_hidden_size=4, decoder_hidden_size=32, hidden_size=16, codebook_dim=8, n_codebooks=9,
                codebook_size=1024, sampling_rate=44100)


def full_dac() -> dict:
    """descript/dac_44khz: transformers' `DacConfig()` defaults at 44.1 kHz (~74 M parameters)."""
    return dict(sampling_rate=44100)


def tiny() -> Preset:
    """2 layers of 64 (4 heads / 2 KV heads of 16, MLP 128), the official conditioners at that width; a speaker
    model of 2 blocks per stage at 4 planes."""
    return Preset(ZonosConfig(BackboneShape(d_model=64, n_layer=2, num_heads=4, num_heads_kv=2,
                                            attn_mlp_d_intermediate=128)), tiny_dac(),
                  SpeakerConfig(in_planes=4, num_blocks=(2, 2, 2, 2)))


def zonos_1_6b() -> Preset:
    """Zonos-v0.1-transformer: 26 layers of 2048, 16 heads / 4 KV heads of 128, gated MLP 8192, LayerNorm; the
    speaker model ResNet293 at 64 planes."""
    return Preset(ZonosConfig(BackboneShape(d_model=2048, n_layer=26, num_heads=16, num_heads_kv=4,
                                            attn_mlp_d_intermediate=8192)), full_dac(), SpeakerConfig())


PRESETS = {"zonos-tiny": tiny, "zonos-1.6b": zonos_1_6b}


def preset_config(name: str) -> Preset:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; known: {sorted(PRESETS)}")
    return PRESETS[name]()


def random_voices(seed: int) -> dict[str, torch.Tensor]:
    """Preset voices: N(0, 1) 128-d speaker embeddings, deterministic in seed."""
    generator = torch.Generator().manual_seed(seed)
    return {name: torch.randn(SPEAKER_DIM, generator=generator) for name in PRESET_VOICES}
