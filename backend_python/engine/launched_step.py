"""A decode step in flight (the engine's overlapped step): its rows, and its codes on their way to the host."""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class LaunchedStep:
    """A decode step in flight: its rows, and its codes on their way to the host."""

    rows: list  # the Sequences of batch rows 0..n-1, as launched
    segments: list[int]  # each row's segment index at launch (segments.py)
    codes: torch.Tensor  # [n, K] int64, host (pinned when copied from CUDA)
    is_eos: torch.Tensor  # [n] bool, host
    ready: torch.cuda.Event | None  # recorded after the copies; None on the CPU
    launched_at: float  # engine clock

    @classmethod
    def start(cls, rows: list, codes: torch.Tensor, is_eos: torch.Tensor, now: float) -> "LaunchedStep":
        segment_of = [seq.segment.index for seq in rows]
        if codes.device.type != "cuda":
            return cls(rows, segment_of, codes, is_eos, None, now)
        host_codes, host_eos = codes.to("cpu", non_blocking=True), is_eos.to("cpu", non_blocking=True)
        ready = torch.cuda.Event()
        ready.record()
        return cls(rows, segment_of, host_codes, host_eos, ready, now)

    def wait(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.ready is not None:
            self.ready.synchronize()
        return self.codes, self.is_eos
