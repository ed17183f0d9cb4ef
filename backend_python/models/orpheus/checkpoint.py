"""Reading checkpoints in the transformers Llama layout (the tiny builder and writer are `tiny.py`).

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
from ..checkpoint_io import CONFIG_FILE
from .config import OrpheusConfig

HEAD_KEY = "lm_head.weight"


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
