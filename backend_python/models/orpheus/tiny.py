"""The tiny checkpoint: random weights of the `tiny` preset written in the transformers Llama layout,
with its SNAC under `snac/`, so tests and the e2e server load it like a real one (`checkpoint.py`
reads it back)."""
from __future__ import annotations

from pathlib import Path

import torch

from ..checkpoint_io import cpu_state, write_checkpoint
from .codec import SNAC_DIR, build_codec_checkpoint
from .lm import OrpheusLM
from .presets import build_tiny_tokenizer, tiny, tiny_snac


def save_checkpoint(lm: OrpheusLM, out_dir: str | Path) -> None:
    """Write config.json, model.safetensors and the tokenizer files of an `OrpheusLM`."""
    write_checkpoint(out_dir, lm.config.to_dict(), cpu_state(lm.backbone.state_dict()), lm.tokenizer)


def build_tiny_checkpoint(out_dir: str | Path, seed: int = 0) -> Path:
    """Write a complete random-weight tiny checkpoint (LM + tokenizer + snac/), deterministic in seed."""
    lm = OrpheusLM.from_config(tiny(), device="cpu", dtype=torch.float32, seed=seed, tokenizer=build_tiny_tokenizer())
    save_checkpoint(lm, out_dir)
    build_codec_checkpoint(tiny_snac(), Path(out_dir) / SNAC_DIR, seed=seed)
    return Path(out_dir)
