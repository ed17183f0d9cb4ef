"""Named configs: a tiny one for CPU tests (materialised as a checkpoint by `tiny.py`) and the full shape
(`higgs-v3-4b`: Qwen3-4B's backbone, the Higgs audio tokenizer's shape; random weights in memory), the tiny
text tokenizer, and the preset voices' reference codes (random: a preset has no recordings)."""
from __future__ import annotations

import torch

from ..checkpoint_io import TINY_BPE_SENTENCES, train_byte_level_bpe
from .config import AudioTokenizerConfig, BackboneConfig, HiggsV3Config

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|audio_bos|>", "<|audio_eos|>",
                  "<|audio_out_bos|>", "<|AUDIO|>", "<|AUDIO_OUT|>"]
TINY_BPE_CORPUS = ["system user assistant Generate audio following instruction."] * 20 + list(TINY_BPE_SENTENCES)
TINY_BPE_VOCAB_SIZE = 400
TINY_TEXT_VOCAB_SIZE = 512  # >= the tiny BPE's 400 tokens
# the reference's example voices (examples/voice_prompts), each a transcript and random codes here
PRESET_VOICES = {"en_woman": TINY_BPE_SENTENCES[0], "en_man": TINY_BPE_SENTENCES[1]}
VOICE_FRAMES = 12  # frames of a preset voice's random reference codes


# a 1-layer HuBERT of width 8 with HuBERT's 320-sample conv front end (the semantic branch of the voice encoder)
TINY_HUBERT = dict(hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16, conv_dim=[8] * 7,
                   num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2)


def tiny_tokenizer_config() -> AudioTokenizerConfig:
    """The real topology (8 codebooks of 1024, hop 960 = 8·5·4·2·3 at 24 kHz: 25 frames/s) at tiny widths."""
    return AudioTokenizerConfig(D=16, decoder_dim=64, encoder_dim=4, semantic_dim=8, codebook_dim=8,
                                extra={"semantic_model_config": TINY_HUBERT})


def tiny() -> HiggsV3Config:
    """2 Qwen3 layers × 64 (4/2 heads × 16), the full audio vocabulary (8 × 1026)."""
    backbone = BackboneConfig(vocab_size=TINY_TEXT_VOCAB_SIZE, hidden_size=64, intermediate_size=128,
                              num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    return HiggsV3Config(backbone, tiny_tokenizer_config(), voices=dict(PRESET_VOICES))


def higgs_v3_4b() -> HiggsV3Config:
    """Qwen3-4B's backbone (36 layers × 2560, GQA 32/8 × 128, MLP 9728, vocab 151936, RoPE theta 1e6) and the
    Higgs audio tokenizer's shape (D 256, decoder 1024 channels, codebook_dim 64; transformers'
    `HiggsAudioV2TokenizerConfig` defaults at hop 960)."""
    backbone = BackboneConfig(vocab_size=151936, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
                              num_attention_heads=32, num_key_value_heads=8, head_dim=128)
    return HiggsV3Config(backbone, AudioTokenizerConfig(), voices=dict(PRESET_VOICES))


PRESETS = {"higgs-v3-tiny": tiny, "higgs-v3-4b": higgs_v3_4b}


def preset_config(name: str) -> HiggsV3Config:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; known: {sorted(PRESETS)}")
    return PRESETS[name]()


def random_voice_codes(config: HiggsV3Config, seed: int) -> dict[str, torch.Tensor]:
    """Each preset voice's reference codes [VOICE_FRAMES, K] int64, deterministic in seed."""
    generator = torch.Generator().manual_seed(seed)
    shape = (VOICE_FRAMES, config.audio_num_codebooks)
    return {name: torch.randint(0, config.audio_codebook_size, shape, generator=generator) for name in config.voices}


def build_tiny_tokenizer():
    """A byte-level BPE trained offline on a few sentences, with Qwen's chat specials and Higgs's audio ones."""
    from transformers import PreTrainedTokenizerFast

    bpe = train_byte_level_bpe(SPECIAL_TOKENS, TINY_BPE_CORPUS, TINY_BPE_VOCAB_SIZE)
    return PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   additional_special_tokens=SPECIAL_TOKENS[1:])
