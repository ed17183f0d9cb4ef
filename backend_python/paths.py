"""Where VoxLane keeps files between runs (torch-free: the router and the voice registry read it too)."""
from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """`$VOXLANE_CACHE`, else ~/.cache/voxlane: tiny checkpoints, compiled kernels, and the default data directory."""
    return Path(os.environ.get("VOXLANE_CACHE", Path.home() / ".cache" / "voxlane"))


def default_data_dir() -> Path:
    """The server's data directory when `voxlane serve --data-dir` is not given (registered voices live here)."""
    return cache_dir() / "data"
