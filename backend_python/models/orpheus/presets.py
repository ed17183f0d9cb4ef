"""Named configs: a tiny one for CPU tests and the real 3B shape (random weights via `from_config`).

The tiny backbone keeps the full Orpheus vocabulary (156940: the audio and control token ids must
exist) with a tiny hidden size; its SNAC keeps the real hop (512), strides and codebook size
(4096), so frames, codes and samples per frame are the real ones, with narrow channels. The tiny
preset's tokenizer is here too; the checkpoint builder is `tiny.py`.
"""
from __future__ import annotations

from ..checkpoint_io import TINY_BPE_SENTENCES, train_byte_level_bpe
from .codec import SnacConfig
from .config import OrpheusConfig

TINY_BPE_SPECIALS = ["<|begin_of_text|>", "<|eot_id|>"]
TINY_BPE_CORPUS = ["tara leah jess leo dan mia zac zoe: "] * 20 + list(TINY_BPE_SENTENCES)
TINY_BPE_VOCAB_SIZE = 400


def tiny() -> OrpheusConfig:
    """2 layers, hidden 64, GQA 4/2 heads, llama3 RoPE (~10 M parameters, nearly all embeddings)."""
    return OrpheusConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=16)


def orpheus_3b() -> OrpheusConfig:
    """canopylabs/orpheus-3b-0.1-ft's shape (Llama-3.2-3B, 3.3 B parameters with tied embeddings)."""
    return OrpheusConfig()


def tiny_snac() -> SnacConfig:
    return SnacConfig(encoder_dim=8, decoder_dim=32)


def full_snac() -> SnacConfig:
    """hubertsiuzdak/snac_24khz (19.8 M parameters)."""
    return SnacConfig()


PRESETS = {"orpheus-tiny": tiny, "orpheus-3b": orpheus_3b}


def preset_config(name: str) -> OrpheusConfig:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; known: {sorted(PRESETS)}")
    return PRESETS[name]()


def build_tiny_tokenizer():
    """A byte-level BPE trained offline on a few sentences; like Llama-3's, it prepends <|begin_of_text|>."""
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast

    bpe = train_byte_level_bpe(TINY_BPE_SPECIALS, TINY_BPE_CORPUS, TINY_BPE_VOCAB_SIZE)
    bos = TINY_BPE_SPECIALS[0]
    bpe.post_processor = processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, 0)])
    return PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token=bos, eos_token=TINY_BPE_SPECIALS[1],
                                   pad_token=TINY_BPE_SPECIALS[1])
