"""Named configs: `voxtral-tiny` for CPU tests (materialised as a checkpoint by `tiny.py`) and `voxtral-4b`, the
published shape (`mistralai/Voxtral-4B-TTS-2603`'s params.json) with random weights in memory."""
from __future__ import annotations

from .config import BackboneConfig, CodecConfig, FlowHeadConfig, VoxtralConfig
from .tokenizer import NUM_SPECIAL_TOKENS

# the published preset voices, in id order
VOICES = ("casual_female", "casual_male", "cheerful_female", "neutral_female", "neutral_male", "pt_male",
          "pt_female", "nl_male", "nl_female", "it_male", "it_female", "fr_male", "fr_female", "es_male",
          "es_female", "de_male", "de_female", "ar_male", "hi_male", "hi_female")
TINY_VOICES = VOICES[:2]


def voxtral_4b() -> VoxtralConfig:
    """26 Mistral layers × 3072 (GQA 32/8 × 128, SwiGLU 9216, vocab 131072), the flow head (3 layers × 3072,
    7 Euler steps, guidance 1.2), 1 + 36 codes per 12.5 Hz frame, the codec's decoder (1024 wide, 4 stages
    of 2 layers)."""
    return VoxtralConfig(BackboneConfig(), FlowHeadConfig(), CodecConfig(voice={v: i for i, v in enumerate(VOICES)}))


def tiny() -> VoxtralConfig:
    """2 backbone layers × 64 (4/2 heads × 16), a 1-layer flow head × 64, the full code layout (8192 semantic
    codes, 36 × 21 FSQ levels), the codec's full topology at width 32 (24 kHz, 1920 samples a frame)."""
    backbone = BackboneConfig(dim=64, n_layers=2, head_dim=16, hidden_dim=128, n_heads=4, n_kv_heads=2,
                              vocab_size=NUM_SPECIAL_TOKENS + 256)
    flow = FlowHeadConfig(input_dim=64, dim=64, n_layers=1, head_dim=16, hidden_dim=128, n_heads=4, n_kv_heads=2)
    codec = CodecConfig(dim=32, hidden_dim=64, head_dim=8, n_heads=4, n_kv_heads=4, semantic_dim=16,
                        voice={v: i for i, v in enumerate(TINY_VOICES)})
    return VoxtralConfig(backbone, flow, codec)


PRESETS = {"voxtral-tiny": tiny, "voxtral-4b": voxtral_4b}


def preset_config(name: str) -> VoxtralConfig:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; known: {sorted(PRESETS)}")
    return PRESETS[name]()
