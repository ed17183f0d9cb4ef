"""Named configs: a tiny one for CPU tests and the real 0.5B shape (random weights via `from_config`), and the
tiny preset's tokenizer (the checkpoint builder is `tiny.py`).

The tiny LM keeps the real speech vocabulary (6561 codes + 200 specials: the codec reads the same codes) with
a tiny Qwen2 and a text vocabulary just large enough for the tiny BPE.
"""
from __future__ import annotations

from ..checkpoint_io import TINY_BPE_SENTENCES, train_byte_level_bpe
from ..layers.qwen2 import Qwen2Config
from .config import CosyVoice3Config
from .prompt import ENDOFPROMPT, INSTRUCT_PREFIX

# The special tokens CosyVoice 3's tokenizer adds to Qwen2's, in its order (the first of its list: the
# paralinguistic tags; its phoneme tags, e.g. "[AA1]", are not added here, so they tokenise as text)
COSYVOICE3_SPECIAL_TOKENS = (
    "<|im_start|>", "<|im_end|>", ENDOFPROMPT, "[breath]", "<strong>", "</strong>", "[noise]", "[laughter]",
    "[cough]", "[clucking]", "[accent]", "[quick_breath]", "<laughter>", "</laughter>", "[hissing]", "[sigh]",
    "[vocalized-noise]", "[lipsmack]", "[mn]", "<|endofsystem|>")
EOS_TOKEN = "<|endoftext|>"
TINY_BPE_SPECIALS = [EOS_TOKEN, *COSYVOICE3_SPECIAL_TOKENS]
TINY_BPE_CORPUS = [INSTRUCT_PREFIX.replace(ENDOFPROMPT, " ")] * 50 + list(TINY_BPE_SENTENCES)
TINY_BPE_VOCAB_SIZE = 400
TINY_TEXT_VOCAB_SIZE = 448  # >= the tiny BPE's tokens


def tiny() -> CosyVoice3Config:
    """2 layers, hidden 64, GQA 4/2 heads (~0.9 M parameters, nearly all speech embeddings and head)."""
    llm = Qwen2Config(vocab_size=TINY_TEXT_VOCAB_SIZE, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=4096)
    return CosyVoice3Config(llm=llm)


def cosyvoice3_0_5b() -> CosyVoice3Config:
    """Fun-CosyVoice3-0.5B's LM: Qwen2.5-0.5B (hidden 896, 24 layers, 14/2 heads, tied embeddings) plus the
    speech embedding and head (~0.5 B parameters)."""
    return CosyVoice3Config(llm=Qwen2Config())


PRESETS = {"cosyvoice3-tiny": tiny, "cosyvoice3-0.5b": cosyvoice3_0_5b}


def preset_config(name: str) -> CosyVoice3Config:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; known: {sorted(PRESETS)}")
    return PRESETS[name]()


def build_tiny_tokenizer():
    """A byte-level BPE trained offline on a few sentences, with CosyVoice 3's special tokens first."""
    from transformers import Qwen2TokenizerFast

    bpe = train_byte_level_bpe(TINY_BPE_SPECIALS, TINY_BPE_CORPUS, TINY_BPE_VOCAB_SIZE)
    tokenizer = Qwen2TokenizerFast(tokenizer_object=bpe, unk_token=None, bos_token=None, eos_token=EOS_TOKEN,
                                   pad_token=EOS_TOKEN, errors="replace")
    add_special_tokens(tokenizer)
    return tokenizer


def add_special_tokens(tokenizer) -> None:
    """Add CosyVoice 3's special tokens (those a tokenizer lacks get the next ids, in the reference's order)."""
    tokenizer.add_special_tokens({"additional_special_tokens": list(COSYVOICE3_SPECIAL_TOKENS)})
