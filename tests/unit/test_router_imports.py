"""The router's stub stays small: importing it must not pull in torch (about 180 MB of RSS per stub)."""
from __future__ import annotations

import subprocess
import sys
import textwrap


def test_the_router_does_not_import_torch():
    code = textwrap.dedent("""
        import sys, types
        utils = types.ModuleType("triton_python_backend_utils")  # what the stub provides, as far as imports go
        utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
        sys.modules["triton_python_backend_utils"] = utils
        import backend_python.router.model
        print("torch" in sys.modules)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False"
