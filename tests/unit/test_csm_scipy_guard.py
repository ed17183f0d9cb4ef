"""Mimi must load where scipy is installed but cannot import with the process's numpy (the Python
backend pins numpy<2; a machine's scipy built for numpy 2 fails with `numpy has no attribute long`)."""
from __future__ import annotations

import subprocess
import sys
import textwrap

BROKEN_SCIPY = "raise AttributeError(\"module 'numpy' has no attribute 'long'\")\n"
LOAD_MIMI = textwrap.dedent("""
    import sys
    {guard}
    from transformers.models.mimi.modeling_mimi import MimiModel
    print("loaded", MimiModel.__name__)
""")


def run_with_broken_scipy(tmp_path, guard: str) -> subprocess.CompletedProcess:
    package = tmp_path / "scipy"
    package.mkdir()
    (package / "__init__.py").write_text(BROKEN_SCIPY)
    (package / "optimize.py").write_text("")
    code = LOAD_MIMI.format(guard=guard)
    env_path = f"{tmp_path}"
    return subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {env_path!r})\n{code}"],
                          capture_output=True, text=True, timeout=120)


def test_mimi_loads_beside_an_unimportable_scipy(tmp_path):
    guard = "from backend_python.models.csm.codec import hide_unimportable_scipy; hide_unimportable_scipy()"
    done = run_with_broken_scipy(tmp_path, guard)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "loaded MimiModel" in done.stdout


def test_without_the_guard_the_broken_scipy_breaks_mimi(tmp_path):
    done = run_with_broken_scipy(tmp_path, "")
    assert done.returncode != 0
    assert "has no attribute 'long'" in done.stderr
