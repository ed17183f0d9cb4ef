"""Online estimate of codec decode latency per lane and batch size."""
from __future__ import annotations

import threading
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
    no observation at all returns `prior_s`. Thread-safe.
    """

    def __init__(self, prior_s: float, alpha: float) -> None:
        if not prior_s >= 0.0:
            raise ValueError(f"prior_s must be >= 0, got {prior_s}")
        if not 0.0 < alpha <= 1.0:
            raise ValueError(f"alpha must be in (0, 1], got {alpha}")
        self._prior_s = prior_s
        self._alpha = alpha
        self._lock = threading.Lock()
        self._stats: dict[tuple[Lane, int], LatencyStat] = {}

    @classmethod
    def from_config(cls, config: SchedulerConfig) -> LatencyEstimator:
        return cls(prior_s=config.latency_prior_s, alpha=config.latency_alpha)

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

    def expected(self, lane: Lane, batch_size: int) -> float:
        """Expected decode seconds of a batch of `batch_size` chunks on `lane`."""
        _check_batch_size(batch_size)
        with self._lock:
            sizes = [size for (stat_lane, size) in self._stats if stat_lane == lane]
            if not sizes:
                return self._prior_s
            nearest = min(sizes, key=lambda size: (abs(size - batch_size), -size))
            return self._stats[(lane, nearest)].mean_s

    def snapshot(self) -> list[LatencyStat]:
        """All buckets, for metrics and logs."""
        with self._lock:
            return sorted(self._stats.values(), key=lambda s: (s.lane.value, s.batch_size))


def _check_batch_size(batch_size: int) -> None:
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
