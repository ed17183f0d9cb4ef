"""How long the router keeps finished BLS response iterators alive."""
from __future__ import annotations

import collections
import threading
import time


class Graveyard:
    """Keeps finished BLS response iterators alive for a grace period before they are freed.

    With the Python 3.12 stub, freeing a decoupled BLS iterator right after its
    final response corrupted the stub's memory now and then (a segfault a few
    streams later); held a few seconds, they are freed safely.
    """

    def __init__(self, grace_s: float = 5.0) -> None:
        self._grace_s = grace_s
        self._lock = threading.Lock()
        self._held: collections.deque = collections.deque()  # (time held, object)

    def hold(self, obj: object) -> None:
        now = time.monotonic()
        with self._lock:
            self._held.append((now, obj))
            while self._held and now - self._held[0][0] > self._grace_s:
                self._held.popleft()

    def release_all(self) -> None:
        with self._lock:
            self._held.clear()
