"""The tiny checkpoint: random weights of the `tiny` preset written in the official layout plus our `voices`,
`dac/` and `speaker_embedding/` (checkpoint.py), so tests and the e2e server load it as they would a real one."""
from __future__ import annotations

from pathlib import Path

import torch

from .checkpoint import DAC_DIR, SPEAKER_DIR, write_checkpoint, write_speaker_model
from .codec import DacCodec
from .lm import ZonosLM
from .presets import random_voices, tiny
from .speaker import random_speaker_model


def build_tiny_checkpoint(out_dir: str | Path, seed: int = 0) -> Path:
    """Write config.json, model.safetensors, voices.safetensors, dac/ and speaker_embedding/, deterministic in seed."""
    preset, voices = tiny(), random_voices(seed)
    lm = ZonosLM.from_config(preset.lm, voices, device="cpu", dtype=torch.float32, seed=seed)
    write_checkpoint(out_dir, preset.lm, lm.state_dict(), voices)
    DacCodec.from_config(preset.dac, seed=seed).save(Path(out_dir) / DAC_DIR)
    write_speaker_model(random_speaker_model(preset.speaker, seed), Path(out_dir) / SPEAKER_DIR)
    return Path(out_dir)
