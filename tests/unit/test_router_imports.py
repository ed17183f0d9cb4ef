"""The torch-free stubs stay small: importing the router (`vox_ensemble`) or the voice registry (`voice_registry`,
which reads the model's preset voices through the model registry only at its first register) must not pull in
torch (about 180 MB of RSS per stub)."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


@pytest.mark.parametrize("module", ["backend_python.vox_ensemble.model", "backend_python.voice_registry.model"])
def test_a_torch_free_stub_does_not_import_torch(module):
    code = textwrap.dedent(f"""
        import sys, types
        utils = types.ModuleType("triton_python_backend_utils")  # what the stub provides, as far as imports go
        utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
        sys.modules["triton_python_backend_utils"] = utils
        import {module}
        print("torch" in sys.modules)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False"
