"""The tiny checkpoint: random weights of the `cosyvoice3-tiny` preset in our layout (checkpoint.py), with random
preset voices, the codec under `codec/` and CAMPPlus under `campplus/`, so tests and the e2e server load it like
a real one."""
from __future__ import annotations

from pathlib import Path

import torch

from ..checkpoint_io import cpu_state, write_checkpoint
from .checkpoint import CODEC_DIR, VOICE_ENCODER_DIR, write_voices
from .lm import CosyVoice3LM
from .presets import build_tiny_tokenizer, tiny


def save_checkpoint(lm: CosyVoice3LM, out_dir: str | Path) -> None:
    """Write config.json, model.safetensors, the tokenizer files and voices.safetensors of a `CosyVoice3LM`."""
    write_checkpoint(out_dir, lm.config.to_dict(), cpu_state(lm.state_dict()), lm.tokenizer)
    write_voices(lm.voice_embeddings, out_dir)


def build_tiny_checkpoint(out_dir: str | Path, seed: int = 0) -> Path:
    """Write a complete random-weight tiny checkpoint (LM, tokenizer, voices, codec/, campplus/), deterministic
    in seed."""
    from .codec import CosyVoice3Codec, CosyVoice3CodecConfig
    from .voice_encoder import CampPlusConfig, CampPlusEncoder

    out_dir = Path(out_dir)
    save_checkpoint(CosyVoice3LM.from_config(tiny(), seed=seed, tokenizer=build_tiny_tokenizer()), out_dir)
    codec = CosyVoice3Codec.from_config(CosyVoice3CodecConfig.tiny(), device="cpu", dtype=torch.float32, seed=seed)
    codec.save_pretrained(out_dir / CODEC_DIR)
    encoder = CampPlusEncoder.from_config(CampPlusConfig.tiny(), device="cpu", dtype=torch.float32, seed=seed + 1)
    encoder.save_pretrained(out_dir / VOICE_ENCODER_DIR)
    return out_dir
