"""Mimi must load where scipy is installed but cannot import with the process's numpy (the Python
backend pins numpy<2; a machine's scipy built for numpy 2 fails with `numpy has no attribute long`),
and where scikit-learn, which transformers also imports when installed, needs that scipy."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

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


SCENARIOS = {  # name -> (the guard's code, whether a scikit-learn that needs scipy is installed)
    "guard": (GUARD, False),
    "guard_sklearn": (GUARD, True),
    "no_guard": ("", False),
    "scipy_hidden_alone": ("sys.modules['scipy'] = None", True),  # what the GPU machine showed
    "guard_after_transformers": ("from transformers.utils.import_utils import is_scipy_available\n"
                                 "print('scipy available before', is_scipy_available())\n" + GUARD, True),
}


def fake_packages(root, with_sklearn: bool):
    """A scipy that breaks on import as one built for numpy 2 does, and a scikit-learn that imports it."""
    scipy = root / "scipy"
    scipy.mkdir(parents=True)
    (scipy / "__init__.py").write_text(BROKEN_SCIPY)
    (scipy / "optimize.py").write_text("")
    (scipy / "sparse.py").write_text("csr_array = issparse = None\n")
    if with_sklearn:
        sklearn = root / "sklearn"
        sklearn.mkdir()
        (sklearn / "__init__.py").write_text(SKLEARN_ON_SCIPY)
        (sklearn / "metrics.py").write_text("roc_curve = None\n")
    return root


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, subprocess.CompletedProcess]:
    """Every scenario's own Python process, all started at once (each spends seconds importing transformers)."""
    started = {}
    for name, (guard, with_sklearn) in SCENARIOS.items():
        root = fake_packages(tmp_path_factory.mktemp(name), with_sklearn)
        code = f"import sys; sys.path.insert(0, {str(root)!r})\n{LOAD_MIMI.format(guard=guard)}"
        started[name] = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True)
    done = {}
    for name, process in started.items():
        stdout, stderr = process.communicate(timeout=240)
        done[name] = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    return done


def test_mimi_loads_beside_an_unimportable_scipy(runs):
    done = runs["guard"]
    assert done.returncode == 0, done.stderr[-2000:]
    assert "hidden ['scipy'" in done.stdout  # and a real scikit-learn too, where one is installed
    assert "loaded MimiModel" in done.stdout


def test_mimi_loads_beside_a_sklearn_that_needs_the_broken_scipy(runs):
    done = runs["guard_sklearn"]
    assert done.returncode == 0, done.stderr[-2000:]
    assert "hidden ['scipy', 'sklearn']" in done.stdout
    assert "loaded MimiModel" in done.stdout


def test_without_the_guard_the_broken_scipy_breaks_mimi(runs):
    done = runs["no_guard"]
    assert done.returncode != 0
    assert "has no attribute 'long'" in done.stderr


def test_hiding_scipy_alone_leaves_sklearn_to_break_mimi(runs):
    """What the GPU machine showed: with scipy marked absent, scikit-learn's own import fails."""
    done = runs["scipy_hidden_alone"]
    assert done.returncode != 0
    assert "scipy.sparse" in done.stderr


def test_the_guard_works_after_transformers_has_looked_for_scipy(runs):
    """Tests (and tools) import transformers before any codec loads; its cached answer is reset."""
    done = runs["guard_after_transformers"]
    assert done.returncode == 0, done.stderr[-2000:]
    assert "scipy available before True" in done.stdout
    assert "loaded MimiModel" in done.stdout
