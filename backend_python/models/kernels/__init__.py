"""Fused GPU kernels (Triton language) for hot elementwise paths; every one has a torch fallback."""
from __future__ import annotations

import os

import torch


def is_interpreted() -> bool:
    """Whether Triton's interpreter runs the kernels on the CPU (`TRITON_INTERPRET=1`, for tests)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def runs_kernels_on(device: torch.device | str) -> bool:
    """Whether a kernel (Triton installed) runs for tensors on `device`: CUDA, or the CPU under the interpreter."""
    return torch.device(device).type == "cuda" or is_interpreted()
