"""Named configs: `tontaube-tiny` for CPU tests, `tontaube-2.9b` the official shape (random weights).

The full shape's per-model sizes are Qwen3-1.7B's (28 × 2048, GQA 16/8 × 128, MLP 6144) for the semantic model
and Qwen3-0.6B's (× 1024, MLP 3072) with 16, 8 and 4 layers for the refiners; a 4096-wide head; each vocabulary
ending at its own codebook's codes: these reproduce the reference's stated parameter counts exactly. The special
ids and `dc_base` are the ones a Qwen3 tokenizer with four added tokens gives (an official bundle's config.json
names its own, and they are read from it).
"""
from __future__ import annotations

from .config import NUM_CODEBOOKS, PredictorConfig, TokenIds, TontaubeConfig

# the tiny tokenizer: 256 byte ids, then the specials, then the codes
TINY_IDS = TokenIds(dc_base=264, pad=256, eos=257, text_marker=258, audio_marker=259)
FULL_IDS = TokenIds(dc_base=151673, pad=151643, eos=151670, text_marker=151671, audio_marker=151672)


def tiny() -> TontaubeConfig:
    """2, 1, 1, 1 layers × 64 (4/2 heads × 16, MLP 128), a 64-wide head."""
    return TontaubeConfig(TINY_IDS, tuple(
        PredictorConfig(k, TINY_IDS.vocab_end(k), hidden_size=64, intermediate_size=128,
                        num_hidden_layers=2 if k == 0 else 1, num_attention_heads=4, num_key_value_heads=2,
                        head_dim=16, audio_head_hidden=64, max_position_embeddings=4096)
        for k in range(NUM_CODEBOOKS)))


def tontaube_2_9b() -> TontaubeConfig:
    semantic = PredictorConfig(0, FULL_IDS.vocab_end(0), hidden_size=2048, intermediate_size=6144,
                               num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128)
    refiners = tuple(PredictorConfig(k, FULL_IDS.vocab_end(k), hidden_size=1024, intermediate_size=3072,
                                     num_hidden_layers=layers, num_attention_heads=16, num_key_value_heads=8,
                                     head_dim=128)
                     for k, layers in ((1, 16), (2, 8), (3, 4)))
    return TontaubeConfig(FULL_IDS, (semantic, *refiners))


PRESETS = {"tontaube-tiny": tiny, "tontaube-2.9b": tontaube_2_9b}


def preset_config(name: str) -> TontaubeConfig:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; known: {sorted(PRESETS)}")
    return PRESETS[name]()
