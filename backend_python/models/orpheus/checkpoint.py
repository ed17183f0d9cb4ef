"""Checkpoint I/O in the transformers Llama layout, and the tiny checkpoint builder.

A checkpoint dir holds config.json (model_type `llama`, an Orpheus vocabulary), model.safetensors
or model.safetensors.index.json + shards (`model.*`, `lm_head.*`), the Llama-3 tokenizer files
(tokenizer.json), and optionally `snac/`: the SNAC codec (config.json + pytorch_model.bin or
model.safetensors). Official Orpheus repos carry no codec; then SNAC 24 kHz comes from the
Hugging Face cache (`codec.py`).
"""
from __future__ import annotations

from pathlib import Path

import torch

from .. import checkpoint_io
# WEIGHTS_FILE: re-exported
from ..checkpoint_io import (CONFIG_FILE, TINY_BPE_SENTENCES, WEIGHTS_FILE, cpu_state, train_byte_level_bpe,
                             write_checkpoint)
from .config import OrpheusConfig

HEAD_KEY = "lm_head.weight"

TINY_BPE_SPECIALS = ["<|begin_of_text|>", "<|eot_id|>"]
TINY_BPE_CORPUS = ["tara leah jess leo dan mia zac zoe: "] * 20 + list(TINY_BPE_SENTENCES)
TINY_BPE_VOCAB_SIZE = 400

__all__ = ["read_config", "load_tokenizer", "read_state_dict", "save_checkpoint",
           "build_tiny_tokenizer"]


def read_config(path: str | Path) -> OrpheusConfig:
    return OrpheusConfig.from_json_file(Path(path) / CONFIG_FILE)


def load_tokenizer(path: str | Path):
    """The checkpoint's fast tokenizer (Llama-3's tokenizer.json for real checkpoints)."""
    from transformers import PreTrainedTokenizerFast  # heavy import, only when loading

    return PreTrainedTokenizerFast.from_pretrained(str(path))


def read_state_dict(path: str | Path, config: OrpheusConfig) -> dict[str, torch.Tensor]:
    """`model.*` (and an untied `lm_head.*`) tensors, on CPU in their stored dtype. A tied checkpoint
    may still store `lm_head.weight` (a copy of the embeddings): it is dropped."""
    state = checkpoint_io.read_state_dict(path, lambda k: k.startswith(("model.", "lm_head.")))
    if config.tie_word_embeddings:
        state.pop(HEAD_KEY, None)
    if not state:
        raise ValueError(f"no model.* weights in {path}")
    return state


def save_checkpoint(lm, out_dir: str | Path) -> None:
    """Write config.json, model.safetensors and the tokenizer files of an `OrpheusLM`."""
    write_checkpoint(out_dir, lm.config.to_dict(), cpu_state(lm.backbone.state_dict()), lm.tokenizer)


def build_tiny_tokenizer():
    """A byte-level BPE trained offline on a few sentences; like Llama-3's, it prepends <|begin_of_text|>."""
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast

    bpe = train_byte_level_bpe(TINY_BPE_SPECIALS, TINY_BPE_CORPUS, TINY_BPE_VOCAB_SIZE)
    bos = TINY_BPE_SPECIALS[0]
    bpe.post_processor = processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, 0)])
    return PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token=bos, eos_token=TINY_BPE_SPECIALS[1],
                                   pad_token=TINY_BPE_SPECIALS[1])


def build_tiny_checkpoint(out_dir: str | Path, seed: int = 0) -> Path:
    """Write a complete random-weight tiny checkpoint (LM + tokenizer + snac/), deterministic in seed."""
    from .codec import SNAC_DIR, build_codec_checkpoint
    from .lm import OrpheusLM
    from .presets import tiny, tiny_snac

    lm = OrpheusLM.from_config(tiny(), device="cpu", dtype=torch.float32, seed=seed, tokenizer=build_tiny_tokenizer())
    save_checkpoint(lm, out_dir)
    build_codec_checkpoint(tiny_snac(), Path(out_dir) / SNAC_DIR, seed=seed)
    return Path(out_dir)
