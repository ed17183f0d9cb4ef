"""A daemon thread that calls `tick()` every `period_s` until stopped; a failing tick is logged, never
fatal. The router's watches and the LM's metric export run on one each."""
from __future__ import annotations

import logging
import threading
from typing import Callable

log = logging.getLogger("voxlane")


class Periodic:
    def __init__(self, name: str, period_s: float, tick: Callable[[], object]) -> None:
        self.period_s = period_s
        self._name, self._tick = name, tick
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop ticking; waits for a tick in progress (bounded)."""
        self._stopped.set()
        self._thread.join(timeout=2 * self.period_s + 1.0)

    def _loop(self) -> None:
        while not self._stopped.wait(self.period_s):
            try:
                self._tick()
            except Exception:  # one failed tick must not end the thread
                log.exception("%s: a periodic tick failed", self._name)
