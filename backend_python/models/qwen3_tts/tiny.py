"""The tiny checkpoint: random weights of the `tiny` preset written in the official layout, so tests
and the e2e server load it like a real one (`checkpoint.py` reads it back)."""
from __future__ import annotations

from pathlib import Path

import torch

from ..checkpoint_io import cpu_state, write_checkpoint
from .checkpoint import SPEECH_TOKENIZER_DIR
from .codec import build_tiny_codec_checkpoint
from .lm import Qwen3TTSLM
from .presets import TINY_TEXT_SPECIAL_IDS, build_tiny_tokenizer, tiny


def save_checkpoint(lm: Qwen3TTSLM, out_dir: str | Path) -> None:
    """Write config.json, model.safetensors and the tokenizer files of a `Qwen3TTSLM`."""
    write_checkpoint(out_dir, lm.config.to_dict(), cpu_state(lm.state_dict()), lm.tokenizer)


def build_tiny_checkpoint(out_dir: str | Path, seed: int = 0) -> Path:
    """Write a complete random-weight tiny checkpoint (LM + tokenizer + speech_tokenizer/), deterministic in seed."""
    tokenizer = build_tiny_tokenizer()
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in TINY_TEXT_SPECIAL_IDS}
    if ids != TINY_TEXT_SPECIAL_IDS or len(tokenizer) > tiny().talker.text_vocab_size:
        raise RuntimeError(f"tiny tokenizer drifted from the preset: {ids}, {len(tokenizer)} tokens")
    lm = Qwen3TTSLM.from_config(tiny(), device="cpu", dtype=torch.float32, seed=seed, tokenizer=tokenizer)
    save_checkpoint(lm, out_dir)
    build_tiny_codec_checkpoint(Path(out_dir) / SPEECH_TOKENIZER_DIR, seed=seed)
    return Path(out_dir)
