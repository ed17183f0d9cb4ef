"""Checkpoint I/O in the official Qwen3-TTS layout, and the tiny checkpoint builder.

Layout of a checkpoint dir: config.json (top-level model config with `talker_config`),
model.safetensors or model.safetensors.index.json + shards (keys `talker.*`, maybe
`speaker_encoder.*`, which we ignore), the text tokenizer files, and speech_tokenizer/ (the codec).
"""
from __future__ import annotations

from pathlib import Path

import torch

# WEIGHTS_FILE, WEIGHTS_INDEX_FILE, weight_files: re-exported
from ..checkpoint_io import (CONFIG_FILE, TINY_BPE_SENTENCES, WEIGHTS_FILE, WEIGHTS_INDEX_FILE, cpu_state,
                             read_state_dict, train_byte_level_bpe, weight_files, write_checkpoint)
from .config import Qwen3TTSConfig

SPEECH_TOKENIZER_DIR = "speech_tokenizer"
TALKER_PREFIX = "talker."

TINY_BPE_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|tts_pad|>", "<|tts_text_bos|>",
                     "<|tts_text_eod|>"]
TINY_BPE_CORPUS = ["assistant user system\n"] * 50 + list(TINY_BPE_SENTENCES)
TINY_BPE_VOCAB_SIZE = 400


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


def build_tiny_tokenizer():
    """A byte-level BPE trained offline on a few sentences, with the Qwen special tokens first (ids 0..5)."""
    from transformers import Qwen2TokenizerFast

    bpe = train_byte_level_bpe(TINY_BPE_SPECIALS, TINY_BPE_CORPUS, TINY_BPE_VOCAB_SIZE)
    tokenizer = Qwen2TokenizerFast(tokenizer_object=bpe, unk_token=None, bos_token=None,
                                   eos_token="<|endoftext|>", pad_token="<|endoftext|>", errors="replace")
    tokenizer.add_special_tokens({"additional_special_tokens": TINY_BPE_SPECIALS[1:]})
    return tokenizer


def save_checkpoint(lm, out_dir: str | Path) -> None:
    """Write config.json, model.safetensors and the tokenizer files of a `Qwen3TTSLM`."""
    write_checkpoint(out_dir, lm.config.to_dict(), cpu_state(lm.state_dict()), lm.tokenizer)


def build_tiny_checkpoint(out_dir: str | Path, seed: int = 0) -> Path:
    """Write a complete random-weight tiny checkpoint (LM + tokenizer + speech_tokenizer/), deterministic in seed."""
    from .codec import build_tiny_codec_checkpoint
    from .lm import Qwen3TTSLM
    from .presets import TINY_TEXT_SPECIAL_IDS, tiny

    tokenizer = build_tiny_tokenizer()
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in TINY_TEXT_SPECIAL_IDS}
    if ids != TINY_TEXT_SPECIAL_IDS or len(tokenizer) > tiny().talker.text_vocab_size:
        raise RuntimeError(f"tiny tokenizer drifted from the preset: {ids}, {len(tokenizer)} tokens")
    lm = Qwen3TTSLM.from_config(tiny(), device="cpu", dtype=torch.float32, seed=seed, tokenizer=tokenizer)
    save_checkpoint(lm, out_dir)
    build_tiny_codec_checkpoint(Path(out_dir) / SPEECH_TOKENIZER_DIR, seed=seed)
    return Path(out_dir)
