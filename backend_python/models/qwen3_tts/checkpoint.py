"""Reading checkpoints in the official Qwen3-TTS layout (the tiny builder and writer are `tiny.py`).

Layout of a checkpoint dir: config.json (top-level model config with `talker_config`),
model.safetensors or model.safetensors.index.json + shards (keys `talker.*`, maybe
`speaker_encoder.*`, which we ignore), the text tokenizer files, and speech_tokenizer/ (the codec).
"""
from __future__ import annotations

from pathlib import Path

import torch

from ..checkpoint_io import CONFIG_FILE, read_state_dict
from .config import Qwen3TTSConfig

SPEECH_TOKENIZER_DIR = "speech_tokenizer"
TALKER_PREFIX = "talker."


def read_config(path: str | Path) -> Qwen3TTSConfig:
    return Qwen3TTSConfig.from_json_file(Path(path) / CONFIG_FILE)


def load_tokenizer(path: str | Path):
    """The Qwen2 byte-level BPE of the checkpoint (tokenizer.json, or vocab.json + merges.txt)."""
    from transformers import Qwen2TokenizerFast  # heavy import, only when loading

    return Qwen2TokenizerFast.from_pretrained(str(path))


def read_talker_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """All `talker.*` tensors of a checkpoint, on CPU in their stored dtype."""
    state = read_state_dict(path, lambda k: k.startswith(TALKER_PREFIX))
    if not state:
        raise ValueError(f"no {TALKER_PREFIX}* weights in {path}")
    return state
