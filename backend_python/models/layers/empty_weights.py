"""Modules built with no storage and no initialiser run, for a checkpoint or a random draw to fill.

`torch.device("meta")` alone still runs each module's `reset_parameters`, and torch's meta kernels of the
random initialisers (`normal_`, `uniform_`, ...) import Dynamo on first use: about a second of CPU in every
Triton stub that builds a model, for values a meta tensor cannot hold. transformers' `no_init_weights` and
accelerate's `init_empty_weights` skip them the same way.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch
from torch.nn import init

INITIALISERS = ("uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_", "eye_", "dirac_",
                "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "orthogonal_", "sparse_")


def _untouched(tensor: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    return tensor


@contextmanager
def empty_weights() -> Iterator[None]:
    """Build under `torch.device("meta")` with `torch.nn.init`'s initialisers returning their tensor untouched.

    The caller then loads a state dict (`assign=True`) or materialises (`to_empty`) and draws its own weights.
    The initialisers are swapped module-wide while the block runs: build in one thread at a time.
    """
    saved = {name: getattr(init, name) for name in INITIALISERS}
    try:
        for name in saved:
            setattr(init, name, _untouched)
        with torch.device("meta"):
            yield
    finally:
        for name, fn in saved.items():
            setattr(init, name, fn)
