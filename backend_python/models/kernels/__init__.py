"""Fused GPU kernels (Triton language) for hot elementwise paths; every one has a torch fallback."""
from __future__ import annotations

import os
from typing import Callable

import torch

WARPS = (1, 2, 4, 8, 16)  # the warps a kernel's launch may ask for


def is_interpreted() -> bool:
    """Whether Triton's interpreter runs the kernels on the CPU (`TRITON_INTERPRET=1`, for tests)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def runs_kernels_on(device: torch.device | str) -> bool:
    """Whether a kernel (Triton installed) runs for tensors on `device`: CUDA, or the CPU under the interpreter."""
    return torch.device(device).type == "cuda" or is_interpreted()


def launch_pair(variable: str, text: str | None, default: tuple[int, int], name: str, example: str,
                is_valid: Callable[[int], bool], rule: str) -> tuple[int, int]:
    """A kernel's `NAME,WARPS` tuning knob (the environment variable `variable`'s `text`) -> (value, warps); None:
    `default`. ValueError naming the variable where the text is not two integers, or breaks `rule` or WARPS."""
    if text is None:
        return default
    try:
        value, warps = (int(part) for part in text.split(","))
    except ValueError:
        raise ValueError(f"{variable} must be {name},WARPS (e.g. {example}), got {text!r}") from None
    if not is_valid(value) or warps not in WARPS:
        raise ValueError(f"{variable}: {rule} and warps one of {', '.join(map(str, WARPS))}, got {text!r}")
    return value, warps
