"""`voice_registry`'s stub stays small: loading it imports no torch (only its first register reads the model's
preset voices through the model registry)."""
from __future__ import annotations

import subprocess
import sys
import textwrap


def test_the_voice_registry_does_not_import_torch():
    code = textwrap.dedent("""
        import sys, types
        utils = types.ModuleType("triton_python_backend_utils")  # what the stub provides, as far as imports go
        utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
        sys.modules["triton_python_backend_utils"] = utils
        import backend_python.voices.model
        print("torch" in sys.modules)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False"
