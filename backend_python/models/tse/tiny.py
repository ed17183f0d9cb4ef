"""The tiny checkpoint: the `tiny` preset's random weights as config.json + model.safetensors."""
from __future__ import annotations

import json
from pathlib import Path

from safetensors.torch import save_file

from ..checkpoint_io import cpu_state
from .lm import TSELM
from .presets import tiny


def build_tiny_checkpoint(out_dir: str | Path, seed: int = 0) -> Path:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    lm = TSELM.from_config(tiny(), seed=seed)
    (out_dir / "config.json").write_text(json.dumps(lm.config.to_dict(), indent=2))
    save_file(cpu_state(lm.state_dict()), str(out_dir / "model.safetensors"))
    return out_dir
