"""Named configs: a tiny one for CPU tests and FlashTTS-0.5B's shape (random weights via `from_config`), and the
tiny preset's tokenizer (the checkpoint builder is `tiny.py`).

The tiny LM keeps the real speech vocabulary (6561 codes + 3 stop ids: the codec reads the same codes) with a tiny
Qwen2, two MTP blocks of width 128, and a text vocabulary just large enough for the tiny BPE; its sos and sot are
two special tokens of that BPE (FlashTTS's are Qwen2.5's 151648 and 151649).
"""
from __future__ import annotations

from ..checkpoint_io import TINY_BPE_SENTENCES, train_byte_level_bpe
from ..layers.qwen2 import Qwen2Config
from .config import FlashTTSConfig

EOS_TOKEN = "<|endoftext|>"
TINY_SOS, TINY_SOT = "<|box_start|>", "<|box_end|>"  # Qwen2.5's names for ids 151648 and 151649
TINY_BPE_SPECIALS = [EOS_TOKEN, TINY_SOS, TINY_SOT]  # ids 0, 1, 2
TINY_BPE_VOCAB_SIZE = 400
TINY_TEXT_VOCAB_SIZE = 448  # >= the tiny BPE's tokens


def tiny() -> FlashTTSConfig:
    """2 layers, hidden 64, GQA 4/2 heads; 2 MTP blocks of 4 heads (2 tokens per step)."""
    llm = Qwen2Config(vocab_size=TINY_TEXT_VOCAB_SIZE, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=4096)
    return FlashTTSConfig(llm=llm, sos_token_id=1, sot_token_id=2, head_num=2, inference_head_num=2, mtp_head_num=4,
                          mtp_intermediate_size=128)


def flashtts_0_5b() -> FlashTTSConfig:
    """FlashTTS-0.5B's LM: Qwen2.5-0.5B (hidden 896, 24 layers, 14/2 heads) with CosyVoice 2's speech table and
    head, and 5 MTP blocks (Qwen2 layers of 14 heads, MLP 22016): 5 tokens per step."""
    return FlashTTSConfig(llm=Qwen2Config())


PRESETS = {"flashtts-tiny": tiny, "flashtts-0.5b": flashtts_0_5b}


def preset_config(name: str) -> FlashTTSConfig:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; known: {sorted(PRESETS)}")
    return PRESETS[name]()


def build_tiny_tokenizer():
    """A byte-level BPE trained offline on a few sentences, with the special tokens first."""
    from transformers import Qwen2TokenizerFast

    bpe = train_byte_level_bpe(TINY_BPE_SPECIALS, list(TINY_BPE_SENTENCES), TINY_BPE_VOCAB_SIZE)
    return Qwen2TokenizerFast(tokenizer_object=bpe, unk_token=None, bos_token=None, eos_token=EOS_TOKEN,
                              pad_token=EOS_TOKEN, errors="replace")
