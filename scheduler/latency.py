"""Online estimate of a lane call's latency per lane and batch size: the codec lanes' decodes, and (another
instance) a cascade's refinement lanes' refinements."""
from __future__ import annotations

import math
import threading
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .lanes import Lane

if TYPE_CHECKING:
    from .config import SchedulerConfig


@dataclass(frozen=True)
class LatencyStat:
    """The estimate for one (lane, batch size) bucket."""

    lane: Lane
    batch_size: int
    mean_s: float  # exponentially weighted moving average
    count: int


class LatencyEstimator:
    """EWMA of decode seconds, one bucket per (lane, exact batch size).

    `expected` for a batch size never observed on that lane returns the
    nearest observed batch size of the same lane (on a tie, the larger one:
    latency grows with batch size, so this errs towards urgency); a lane with
    no observation at all returns `prior_s`. `quantile` reads the same bucket's latest `window`
    observations. Thread-safe.
    """

    def __init__(self, prior_s: float, alpha: float, window: int = 64) -> None:
        if not prior_s >= 0.0:
            raise ValueError(f"prior_s must be >= 0, got {prior_s}")
        if not 0.0 < alpha <= 1.0:
            raise ValueError(f"alpha must be in (0, 1], got {alpha}")
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self._prior_s = prior_s
        self._alpha = alpha
        self._window = window
        self._lock = threading.Lock()
        self._stats: dict[tuple[Lane, int], LatencyStat] = {}
        self._recent: dict[tuple[Lane, int], deque[float]] = {}

    @classmethod
    def from_config(cls, config: SchedulerConfig) -> LatencyEstimator:
        return cls(prior_s=config.latency_prior_s, alpha=config.latency_alpha, window=config.latency_window)

    def observe(self, lane: Lane, batch_size: int, seconds: float) -> None:
        """Fold one measured decode latency of a batch of `batch_size` chunks into the estimate."""
        _check_batch_size(batch_size)
        if not seconds >= 0.0:
            raise ValueError(f"seconds must be >= 0, got {seconds}")
        key = (lane, batch_size)
        with self._lock:
            old = self._stats.get(key)
            mean = seconds if old is None else old.mean_s + self._alpha * (seconds - old.mean_s)
            count = 1 if old is None else old.count + 1
            self._stats[key] = LatencyStat(lane, batch_size, mean, count)
            self._recent.setdefault(key, deque(maxlen=self._window)).append(seconds)

    def expected(self, lane: Lane, batch_size: int) -> float:
        """Expected decode seconds of a batch of `batch_size` chunks on `lane`."""
        _check_batch_size(batch_size)
        with self._lock:
            key = self._nearest(lane, batch_size)
            return self._prior_s if key is None else self._stats[key].mean_s

    def quantile(self, lane: Lane, batch_size: int, q: float) -> float:
        """The q-quantile (0 < q < 1) of the latest observations of the bucket `expected` reads;
        `prior_s` before any observation. Nearest rank: the value at or above a q share of them."""
        _check_batch_size(batch_size)
        if not 0.0 < q < 1.0:
            raise ValueError(f"q must be in (0, 1), got {q}")
        with self._lock:
            key = self._nearest(lane, batch_size)
            if key is None:
                return self._prior_s
            recent = sorted(self._recent[key])
        return recent[min(len(recent) - 1, math.ceil(q * len(recent)) - 1)]

    def _nearest(self, lane: Lane, batch_size: int) -> tuple[Lane, int] | None:
        """The observed bucket of `lane` closest to `batch_size` (larger on a tie); the caller holds the lock."""
        sizes = [size for (stat_lane, size) in self._stats if stat_lane == lane]
        if not sizes:
            return None
        return lane, min(sizes, key=lambda size: (abs(size - batch_size), -size))

    def snapshot(self) -> list[LatencyStat]:
        """All buckets, for metrics and logs."""
        with self._lock:
            return sorted(self._stats.values(), key=lambda s: (s.lane.value, s.batch_size))


def _check_batch_size(batch_size: int) -> None:
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
