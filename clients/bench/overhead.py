"""How much the load generator itself delays what it measures.

A response waits in gRPC's queue until the event loop is free, so the loop's lag (how late a short
sleep wakes up) bounds the error on every arrival time; send lag is how late requests went out.
"""
from __future__ import annotations

import asyncio
import time

import numpy as np

LAG_INTERVAL_S = 0.005


class LoopLagMonitor:
    """Samples event-loop lag every `interval_s` until stopped."""

    def __init__(self, interval_s: float = LAG_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.lags_s: list[float] = []
        self._stopped = False

    async def run(self) -> None:
        while not self._stopped:
            started = time.perf_counter()
            await asyncio.sleep(self.interval_s)
            self.lags_s.append(max(0.0, time.perf_counter() - started - self.interval_s))

    def stop(self) -> None:
        self._stopped = True


def overhead_summary(loop_lags_s: list[float], send_lags_s: list[float], cpu_fraction: float,
                     handling_s: list[float]) -> dict:
    """Milliseconds: loop lag and send lag percentiles, per-response handling time; CPU share of one core."""
    return {"loop_lag_ms": _percentiles(loop_lags_s), "send_lag_ms": _percentiles(send_lags_s),
            "response_handling_ms": _percentiles(handling_s), "client_cpu_fraction": round(cpu_fraction, 3),
            "num_responses": len(handling_s)}


def _percentiles(values_s: list[float]) -> dict:
    if not values_s:
        return {"p50": None, "p99": None, "max": None}
    ms = np.asarray(values_s) * 1e3
    return {"p50": round(float(np.percentile(ms, 50)), 3), "p99": round(float(np.percentile(ms, 99)), 3),
            "max": round(float(ms.max()), 3)}
