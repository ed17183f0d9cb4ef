"""Mimi must load where scipy is installed but cannot import with the process's numpy (the Python
backend pins numpy<2; a machine's scipy built for numpy 2 fails with `numpy has no attribute long`),
and where scikit-learn, which transformers also imports when installed, needs that scipy."""
from __future__ import annotations

import subprocess
import sys
import textwrap

BROKEN_SCIPY = "raise AttributeError(\"module 'numpy' has no attribute 'long'\")\n"
SKLEARN_ON_SCIPY = "from scipy.sparse import csr_array, issparse\n"  # as sklearn/utils does
GUARD = ("from backend_python.models.optional_imports import hide_unimportable_optional_packages\n"
         "print('hidden', hide_unimportable_optional_packages())")
LOAD_MIMI = textwrap.dedent("""
    import sys
    {guard}
    from transformers.models.mimi.modeling_mimi import MimiModel
    import transformers.models.auto.modeling_auto  # GenerationMixin: where scikit-learn is imported
    print("loaded", MimiModel.__name__)
""")


def load_mimi_beside(tmp_path, guard: str, with_sklearn: bool) -> subprocess.CompletedProcess:
    scipy = tmp_path / "scipy"
    scipy.mkdir()
    (scipy / "__init__.py").write_text(BROKEN_SCIPY)
    (scipy / "optimize.py").write_text("")
    (scipy / "sparse.py").write_text("csr_array = issparse = None\n")
    if with_sklearn:
        sklearn = tmp_path / "sklearn"
        sklearn.mkdir()
        (sklearn / "__init__.py").write_text(SKLEARN_ON_SCIPY)
        (sklearn / "metrics.py").write_text("roc_curve = None\n")
    code = LOAD_MIMI.format(guard=guard)
    return subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n{code}"],
                          capture_output=True, text=True, timeout=120)


def test_mimi_loads_beside_an_unimportable_scipy(tmp_path):
    done = load_mimi_beside(tmp_path, GUARD, with_sklearn=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "hidden ['scipy'" in done.stdout  # and a real scikit-learn too, where one is installed
    assert "loaded MimiModel" in done.stdout


def test_mimi_loads_beside_a_sklearn_that_needs_the_broken_scipy(tmp_path):
    done = load_mimi_beside(tmp_path, GUARD, with_sklearn=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "hidden ['scipy', 'sklearn']" in done.stdout
    assert "loaded MimiModel" in done.stdout


def test_without_the_guard_the_broken_scipy_breaks_mimi(tmp_path):
    done = load_mimi_beside(tmp_path, "", with_sklearn=False)
    assert done.returncode != 0
    assert "has no attribute 'long'" in done.stderr


def test_hiding_scipy_alone_leaves_sklearn_to_break_mimi(tmp_path):
    """What the GPU machine showed: with scipy marked absent, scikit-learn's own import fails."""
    guard = "sys.modules['scipy'] = None"
    done = load_mimi_beside(tmp_path, guard, with_sklearn=True)
    assert done.returncode != 0
    assert "scipy.sparse" in done.stderr


def test_the_guard_works_after_transformers_has_looked_for_scipy(tmp_path):
    """Tests (and tools) import transformers before any codec loads; its cached answer is reset."""
    guard = ("from transformers.utils.import_utils import is_scipy_available\n"
             "print('scipy available before', is_scipy_available())\n" + GUARD)
    done = load_mimi_beside(tmp_path, guard, with_sklearn=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "scipy available before True" in done.stdout
    assert "loaded MimiModel" in done.stdout
