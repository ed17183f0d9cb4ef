"""The tiny checkpoint: random weights of the `tiny` preset written in the official layout plus our `voices` and
`dac/` (checkpoint.py), so tests and the e2e server load it as they would a real one."""
from __future__ import annotations

from pathlib import Path

import torch

from .checkpoint import DAC_DIR, write_checkpoint
from .codec import DacCodec
from .lm import ZonosLM
from .presets import random_voices, tiny


def build_tiny_checkpoint(out_dir: str | Path, seed: int = 0) -> Path:
    """Write config.json, model.safetensors, voices.safetensors and dac/, deterministic in seed."""
    preset, voices = tiny(), random_voices(seed)
    lm = ZonosLM.from_config(preset.lm, voices, device="cpu", dtype=torch.float32, seed=seed)
    write_checkpoint(out_dir, preset.lm, lm.state_dict(), voices)
    DacCodec.from_config(preset.dac, seed=seed).save(Path(out_dir) / DAC_DIR)
    return Path(out_dir)
