"""The tiny checkpoint: random weights of the `tiny` preset written in the official layout (checkpoint.py), so
tests and the e2e server load it as a real one."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from ..checkpoint_io import cpu_state
from . import checkpoint
from .codec import VoxtralCodec
from .config import PARAMS_FILE
from .lm import VoxtralLM
from .presets import tiny
from .tokenizer import TEKKEN_FILE, byte_tekken_json


def save_checkpoint(lm: VoxtralLM, codec_state: dict[str, torch.Tensor], out_dir: str | Path) -> None:
    """params.json, consolidated.safetensors, tekken.json and voice_embedding/; `codec_state` with its weight
    norm unfolded (the official `parametrizations.weight.original0/1`)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / PARAMS_FILE).write_text(json.dumps(lm.config.to_dict(), indent=2))
    (out_dir / TEKKEN_FILE).write_text(json.dumps(byte_tekken_json()))
    state = checkpoint.official_names(cpu_state(lm.state_dict()), cpu_state(codec_state), lm.config)
    save_file({k: v.contiguous() for k, v in state.items()}, str(out_dir / checkpoint.WEIGHTS_FILE))
    checkpoint.write_voices(out_dir, lm.voice_embeddings)


def build_tiny_checkpoint(out_dir: str | Path, seed: int = 0) -> Path:
    config = tiny()
    lm = VoxtralLM.from_config(config, seed=seed)
    codec = VoxtralCodec.from_config(config.codec, seed=seed)  # weight norm still on: the official names
    save_checkpoint(lm, codec.state_dict(), out_dir)
    return Path(out_dir)
