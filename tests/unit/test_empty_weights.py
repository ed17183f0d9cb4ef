"""Building a model on `meta` runs no initialiser, and a lane that builds the default preset imports no Dynamo."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from backend_python.models.layers.empty_weights import INITIALISERS, empty_weights


def test_modules_are_built_on_meta_and_the_initialisers_come_back():
    before = {name: getattr(nn.init, name) for name in INITIALISERS}
    calls = []
    with empty_weights():
        assert nn.init.normal_(torch.empty(2)) is not None
        calls.append(nn.init.kaiming_uniform_ is before["kaiming_uniform_"])
        model = nn.Sequential(nn.Embedding(10, 4, padding_idx=0), nn.Linear(4, 3), nn.LayerNorm(3), nn.Conv1d(3, 3, 3))
    assert calls == [False]  # swapped inside
    assert all(p.is_meta for p in model.parameters())
    assert {name: getattr(nn.init, name) for name in INITIALISERS} == before


def test_the_initialisers_come_back_when_the_build_raises():
    before = nn.init.normal_
    with pytest.raises(RuntimeError, match="a build that fails"):
        with empty_weights():
            raise RuntimeError("a build that fails")
    assert nn.init.normal_ is before
    assert not torch.empty(1).is_meta  # and the default device


def test_building_the_default_presets_lanes_imports_no_dynamo():
    """Dynamo's import is about a second of CPU in each stub (torch's meta kernels of the initialisers reach it)."""
    code = ("import sys, torch\n"
            "from backend_python.models import registry\n"
            "spec = registry.resolve('qwen3-tts-tiny')\n"
            "registry.load_codec(spec, 'cpu', 'float32'); registry.load_voice_encoder(spec, 'cpu', 'float32')\n"
            "registry.load_lm(spec, 'cpu', 'float32')\n"
            "print(sorted(m for m in sys.modules if m.startswith('torch._dynamo')))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                            cwd=Path(__file__).parents[2])
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "[]", result.stdout[-2000:]
