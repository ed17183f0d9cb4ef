"""Capturing CUDA graphs: warm-up runs on a side stream, then one graph per step in a shared pool."""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

WARMUP_RUNS = 2  # eager runs on a side stream before capture (cuBLAS/flash workspaces, lazy init)


def capture_steps(steps: Sequence[Callable[[], Any]], pool,
                  warmup_runs: int = WARMUP_RUNS) -> list[tuple[torch.cuda.CUDAGraph, Any]]:
    """Run all `steps` in order `warmup_runs` times on a side stream, then capture each, in order, into its
    own graph in `pool` -> [(graph, what the step returned during capture)], one per step."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup_runs):
            for step in steps:
                step()
    torch.cuda.current_stream().wait_stream(side)
    return [_capture(step, pool) for step in steps]


def _capture(step: Callable[[], Any], pool) -> tuple[torch.cuda.CUDAGraph, Any]:
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        output = step()
    return graph, output
