"""The scheduler package stays pure Python: importing it pulls in no torch, numpy or Triton."""
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = ("torch", "numpy", "tritonclient", "triton_python_backend_utils", "tritonserver")


def test_scheduler_imports_no_heavy_modules():
    code = (
        "import sys, scheduler, scheduler.routing, scheduler.admission\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r})\n"
        "print(','.join(bad))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                            text=True, check=True)
    assert result.stdout.strip() == ""
