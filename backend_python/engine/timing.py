"""Where the LM lane's time goes: running estimates for admission, and a per-phase account for metrics."""
from __future__ import annotations

import enum
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable


class StepTiming:
    """Running estimates of a decode step and of prefill per position run (EWMA, seconds). A prefill's positions are
    those it ran: a cached prompt prefix's are copied, not run, and counting them would make a position look cheap."""

    def __init__(self, alpha: float = 0.1) -> None:
        self._alpha = alpha
        self.step_s = 0.0
        self._prefill_per_position_s = 0.0

    def observe_step(self, seconds: float) -> None:
        self.step_s += self._alpha * (seconds - self.step_s) if self.step_s else seconds

    def observe_prefill(self, num_positions: int, seconds: float) -> None:
        per_position = seconds / max(1, num_positions)
        old = self._prefill_per_position_s
        self._prefill_per_position_s = old + self._alpha * (per_position - old) if old else per_position

    def prefill_s(self, num_positions: int) -> float:
        """The estimate for a prefill of `num_positions` (admission's: a waiting prompt's tokens, as if none were
        cached)."""
        return self._prefill_per_position_s * num_positions


class LoopPhase(enum.Enum):
    """What the engine thread is doing. Together the phases cover its whole wall time."""

    PREFILL = "prefill"  # prefilling admitted requests (launches, and any wait for the GPU inside)
    DECODE = "decode"  # launching a decode step, and waiting for a step's codes to reach the host
    HOST = "host"  # everything else: collecting requests, admission, cutting and sending chunks
    IDLE = "idle"  # blocked with no request to serve


@dataclass(frozen=True)
class Occupancy:
    """The LM lane's streams as of its last step: resident (holding a slot) and waiting for one, and its KV
    blocks (a pooled cache; 0 and 0 with static rows)."""

    num_live: int = 0
    num_waiting: int = 0
    kv_blocks_used: int = 0
    kv_blocks_free: int = 0


@dataclass
class PhaseTotals:
    """Seconds per phase and decode steps per batch size since the last `PhaseClock.drain`; the integrals of
    the occupancy over the same time, and the occupancy at its end."""

    seconds: dict[LoopPhase, float] = field(default_factory=lambda: {phase: 0.0 for phase in LoopPhase})
    step_batch_sizes: Counter = field(default_factory=Counter)  # batch size -> number of steps
    live_stream_s: float = 0.0  # the integral of live streams over time (its mean: / the seconds)
    waiting_s: float = 0.0  # the time some request waited for a slot or KV memory
    idle_waiting_s: float = 0.0  # the idle time while some request waited
    occupancy: Occupancy = field(default_factory=Occupancy)


class PhaseClock:
    """Charges the engine thread's time to phases: `charge(phase)` books the time since the last
    charge to `phase`. The engine thread charges; another thread drains (metrics), hence the lock."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._mark = clock()
        self._totals = PhaseTotals()
        self._occupancy = Occupancy()

    def charge(self, phase: LoopPhase) -> None:
        now = self._clock()
        seconds, occupancy = now - self._mark, self._occupancy
        with self._lock:
            totals = self._totals
            totals.seconds[phase] += seconds
            totals.live_stream_s += seconds * occupancy.num_live
            if occupancy.num_waiting:
                totals.waiting_s += seconds
                totals.idle_waiting_s += seconds if phase is LoopPhase.IDLE else 0.0
        self._mark = now

    def set_occupancy(self, occupancy: Occupancy) -> None:
        """From the next charge on, time accrues to this occupancy."""
        self._occupancy = occupancy

    def on_step(self, batch_size: int) -> None:
        with self._lock:
            self._totals.step_batch_sizes[batch_size] += 1

    def drain(self) -> PhaseTotals:
        """The totals since the last drain (and start afresh)."""
        with self._lock:
            totals, self._totals = self._totals, PhaseTotals()
        totals.occupancy = self._occupancy
        return totals
