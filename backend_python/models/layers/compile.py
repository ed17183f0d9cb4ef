"""Compiling a family's decode hot path with Inductor, once per process.

Regional compilation: each decoder layer's forward is compiled, and dynamo's inlined modules let
all layers of a stack (and every bucket's batch size, once the batch dimension is dynamic) share a
few compiled graphs, so start-up pays for one layer per shape rather than a whole stack. The
compiled kernels land on disk in Inductor's cache (under `VOXLANE_CACHE` when set, see
`set_cache_dir`), which a later start reuses.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

import torch

# compiled entries per code object: the layer forward meets decode (T=1) at several batch sizes,
# the predictor's first step (T=2), and prefills of any length, in two stacks of different widths
RECOMPILE_LIMIT = 64


def set_cache_dir() -> None:
    """Keep Inductor's caches beside the model cache, so a restart finds what an earlier start compiled."""
    root = os.environ.get("VOXLANE_CACHE")
    if root and "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(Path(root) / "inductor")


def compile_hot_path(stacks: Iterable) -> None:
    """Compile every layer of each `DecoderStack` in `stacks`."""
    set_cache_dir()
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, RECOMPILE_LIMIT)
    torch._dynamo.config.accumulated_cache_size_limit = max(
        torch._dynamo.config.accumulated_cache_size_limit, 4 * RECOMPILE_LIMIT)
    for stack in stacks:
        stack.compile_layers()
