"""Calls in flight per lane: the batch a new call would join, and the urgent lane's budget count."""
from __future__ import annotations

import threading
import time

from scheduler import Lane


class InFlight:
    """Thread-safe counts, one per lane; `enter` before a call and `leave` after it, however it ends."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = {lane: 0 for lane in Lane}

    def enter(self, lane: Lane) -> None:
        with self._lock:
            self._counts[lane] += 1

    def leave(self, lane: Lane) -> None:
        with self._lock:
            self._counts[lane] -= 1

    def count(self, lane: Lane) -> int:
        with self._lock:
            return self._counts[lane]


def exec_in_flight(request, in_flight: InFlight, lane: Lane) -> tuple[object, float]:
    """`request.exec()` counted in flight on `lane` while it runs (a raise releases the count too) -> (its response,
    the seconds it took)."""
    in_flight.enter(lane)
    started = time.monotonic()
    try:
        response = request.exec()
    finally:
        in_flight.leave(lane)
    return response, time.monotonic() - started
