"""The tiny checkpoint: random weights of the `flashtts-tiny` preset in our layout (checkpoint.py), with random
preset voices and the tiny codec under `codec/`, so tests and the e2e server load it like a real one."""
from __future__ import annotations

from pathlib import Path

from .checkpoint import codec_dir, save_checkpoint
from .codec import FlashTTSCodec
from .codec_config import FlashTTSCodecConfig
from .lm import FlashTTSLM
from .presets import build_tiny_tokenizer, tiny


def build_tiny_checkpoint(out_dir: str | Path, seed: int = 0) -> Path:
    """Write a complete random-weight tiny checkpoint (LM, tokenizer, voices, codec/), deterministic in seed."""
    out_dir = Path(out_dir)
    save_checkpoint(FlashTTSLM.from_config(tiny(), seed=seed, tokenizer=build_tiny_tokenizer()), out_dir)
    FlashTTSCodec.from_config(FlashTTSCodecConfig.tiny(), seed=seed).save_pretrained(codec_dir(out_dir))
    return out_dir
