"""transformers' optional imports, where installed but broken for this process's numpy."""
from __future__ import annotations

import importlib
import importlib.util
import logging
import sys

log = logging.getLogger("voxlane.models")

# what transformers imports, when installed, as its modeling code loads: scipy (object-detection
# losses) and scikit-learn (assisted generation's `roc_curve`), which itself needs scipy
OPTIONAL_IMPORTS = {"scipy": ("scipy.optimize", "scipy.sparse"), "sklearn": ("sklearn.metrics",)}


def hide_unimportable_optional_packages() -> list[str]:
    """Mark transformers' optional packages absent where installed but unimportable here; returns them.

    Triton 2.51's Python backend needs numpy<2; a machine's scipy built for numpy 2 then fails on
    import (seen: `module 'numpy' has no attribute 'long'`), and scikit-learn with it, which takes
    `MimiModel` down as transformers' modeling code loads. A `None` entry in sys.modules makes
    `find_spec` answer "not installed", so transformers skips the package. Order matters: scipy
    first, so that a scikit-learn that needs it is found broken too.
    """
    hidden: list[str] = []
    if "transformers.modeling_utils" in sys.modules:  # too late: transformers has looked already
        return hidden
    for package, modules in OPTIONAL_IMPORTS.items():
        if sys.modules.get(package, False) is None or importlib.util.find_spec(package) is None:
            continue
        try:
            for module in modules:
                importlib.import_module(module)
        except Exception:  # any failure: ImportError, or AttributeError from a numpy mismatch
            for name in [n for n in sys.modules if n == package or n.startswith(package + ".")]:
                del sys.modules[name]
            sys.modules[package] = None
            hidden.append(package)
    if hidden and "transformers.utils.import_utils" in sys.modules:  # forget what it found before
        checks = sys.modules["transformers.utils.import_utils"]
        for package in hidden:
            getattr(getattr(checks, f"is_{package}_available", None), "cache_clear", lambda: None)()
    if hidden:
        log.warning("optional packages installed but not importable here, treated as absent: %s",
                    ", ".join(hidden))
    return hidden
