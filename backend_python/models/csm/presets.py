"""Named configs: a tiny one for CPU tests and the full CSM-1B shape (= transformers' `CsmConfig()`
defaults, random weights via `from_config`), and the tiny preset's tokenizer (the checkpoint builder
is `tiny.py`)."""
from __future__ import annotations

from ..checkpoint_io import TINY_BPE_SENTENCES, train_byte_level_bpe
from .config import CsmConfig, DepthDecoderConfig, LlamaShape, RopeConfig

TINY_CODEBOOK_SIZE = 64
TINY_VOCAB_SIZE = TINY_CODEBOOK_SIZE + 3  # as 2051 = 2048 + 3: pad (and two more) above the audio codes
TINY_TEXT_VOCAB_SIZE = 512  # >= the tiny BPE's 400 tokens
TINY_SPEAKERS = ("0", "1")
TINY_BOS, TINY_EOS = "<|begin_of_text|>", "<|end_of_text|>"
TINY_BPE_SPECIALS = [TINY_BOS, TINY_EOS]
TINY_BPE_CORPUS = ["[0][1][2][3] "] * 50 + list(TINY_BPE_SENTENCES)
TINY_BPE_VOCAB_SIZE = 400
LLAMA3_ROPE = RopeConfig(rope_theta=500_000.0, rope_type="llama3", factor=32.0, low_freq_factor=1.0,
                         high_freq_factor=4.0, original_max_position_embeddings=8192)


def tiny_mimi() -> dict:
    """A ~0.15 M-parameter Mimi with the real topology: 32 quantizers, 12.5 Hz, 24 kHz, 1920 samples a frame."""
    return dict(model_type="mimi", hidden_size=32, num_filters=4, codebook_size=TINY_CODEBOOK_SIZE, codebook_dim=16,
                vector_quantization_hidden_dimension=16, num_quantizers=32, upsample_groups=32, num_hidden_layers=2,
                intermediate_size=64, num_attention_heads=4, num_key_value_heads=4, head_dim=8, frame_rate=12.5,
                sampling_rate=24000)


def full_mimi() -> dict:
    """transformers' `MimiConfig()` defaults: the released Mimi shape (~79 M parameters)."""
    return dict(model_type="mimi", codebook_size=2048, num_quantizers=32, frame_rate=12.5, sampling_rate=24000)


def tiny() -> CsmConfig:
    """2-layer backbone (hidden 64) + 1-layer depth decoder (hidden 32; it runs 31 steps a frame), 64-code
    codebooks, Llama-3 RoPE."""
    backbone = LlamaShape(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, head_dim=16, rope=LLAMA3_ROPE)
    depth = LlamaShape(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                       num_key_value_heads=1, head_dim=16, rope=LLAMA3_ROPE)
    return CsmConfig(backbone=backbone, depth_decoder=DepthDecoderConfig(depth, 64, 32, TINY_VOCAB_SIZE),
                     codec=tiny_mimi(), vocab_size=TINY_VOCAB_SIZE, text_vocab_size=TINY_TEXT_VOCAB_SIZE,
                     codebook_pad_token_id=TINY_VOCAB_SIZE - 1, bos_token_id=0, pad_token_id=1, audio_token_id=2,
                     audio_eos_token_id=3, speakers=TINY_SPEAKERS)


def csm_1b() -> CsmConfig:
    """transformers' `CsmConfig()` defaults: backbone 2048 x 16 layers (32/8 heads), depth decoder
    1024 x 4 layers (8/2 heads, intermediate 8192), 32 codebooks of 2051 ids, default RoPE theta 5e5."""
    backbone = LlamaShape(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                          num_key_value_heads=8, head_dim=64)
    depth = LlamaShape(hidden_size=1024, intermediate_size=8192, num_hidden_layers=4, num_attention_heads=8,
                       num_key_value_heads=2, head_dim=128)
    return CsmConfig(backbone=backbone, depth_decoder=DepthDecoderConfig(depth, 2048), codec=full_mimi())


PRESETS = {"csm-tiny": tiny, "csm-1b": csm_1b}


def preset_config(name: str) -> CsmConfig:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; known: {sorted(PRESETS)}")
    return PRESETS[name]()


def build_tiny_tokenizer():
    """A byte-level BPE trained offline on a few sentences, adding BOS and EOS like CSM's Llama-3 tokenizer."""
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast

    bpe = train_byte_level_bpe(TINY_BPE_SPECIALS, TINY_BPE_CORPUS, TINY_BPE_VOCAB_SIZE)
    bos, eos = bpe.token_to_id(TINY_BOS), bpe.token_to_id(TINY_EOS)
    bpe.post_processor = processors.TemplateProcessing(
        single=f"{TINY_BOS} $A {TINY_EOS}", special_tokens=[(TINY_BOS, bos), (TINY_EOS, eos)])
    return PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token=TINY_BOS, eos_token=TINY_EOS,
                                   pad_token=TINY_EOS)
