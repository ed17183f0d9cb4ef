"""A family package's public names, imported on first use: its LM and codec import torch, and its
`description.py`, imported through the package, must read without it."""
from __future__ import annotations

from collections.abc import Callable
from importlib import import_module


def lazy_exports(package: str, exports: dict[str, str]) -> Callable[[str], object]:
    """The module `__getattr__` of `package` that imports `name` from its submodule `exports[name]` when asked."""
    def __getattr__(name: str) -> object:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(import_module(f"{package}.{exports[name]}"), name)
    return __getattr__
