"""The tiny checkpoint: random weights of the `tiny` preset (LM and Mimi) written in the official
layout, so tests and the e2e server load it like a real one (`checkpoint.py` reads it back)."""
from __future__ import annotations

from pathlib import Path

import torch

from ..checkpoint_io import cpu_state, write_checkpoint
from .checkpoint import CODEC_PREFIX, DEPTH_AUDIO_TABLE
from .codec import MimiCodec
from .lm import CsmLM
from .presets import build_tiny_tokenizer, tiny


def save_checkpoint(lm: CsmLM, codec_state: dict[str, torch.Tensor], out_dir: str | Path) -> None:
    """Write config.json, model.safetensors (LM keys + `codec_model.*`) and the tokenizer files."""
    state = cpu_state(lm.state_dict())
    state[DEPTH_AUDIO_TABLE] = state[DEPTH_AUDIO_TABLE].clone()  # safetensors refuses shared storage
    state.update({CODEC_PREFIX + k: v for k, v in cpu_state(codec_state).items()})
    write_checkpoint(out_dir, lm.config.to_dict(), state, lm.tokenizer)


def build_tiny_checkpoint(out_dir: str | Path, seed: int = 0) -> Path:
    """Write a complete random-weight tiny checkpoint (LM + Mimi + tokenizer), deterministic in seed."""
    config, tokenizer = tiny(), build_tiny_tokenizer()
    if len(tokenizer) > config.text_vocab_size:
        raise RuntimeError(f"tiny tokenizer has {len(tokenizer)} tokens, over text_vocab_size {config.text_vocab_size}")
    lm = CsmLM.from_config(config, device="cpu", dtype=torch.float32, seed=seed, tokenizer=tokenizer)
    codec = MimiCodec.from_config(config.codec, seed=seed)
    save_checkpoint(lm, codec.model.state_dict(), out_dir)
    return Path(out_dir)
