"""Notices a dead LM process while streams wait on it, and ends those streams with a clear error.

A stream's worker waits for the LM's next chunk on the chunk channel; when the LM's Python stub
dies, nothing more comes, so the stream would wait forever. While any stream is live this thread
probes the LM every `period_s` (the router looks for the LM's stub process in /proc: no request
to the LM, since every BLS request made at runtime costs tritonserver memory in Triton 2.51); a probe
that finds the stub gone calls `on_dead()` once. Probing resumes when `is_lm_available()` says the
LM was loaded again.
"""
from __future__ import annotations

from typing import Callable

from backend_python.stub_common.periodic import Periodic


class LMWatch:
    def __init__(self, is_dead: Callable[[], bool], on_dead: Callable[[], None],
                 has_streams: Callable[[], bool], is_lm_available: Callable[[], bool],
                 period_s: float = 1.0) -> None:
        """`is_dead()` probes the LM's process (StubWatch.is_dead)."""
        self._is_dead, self._on_dead = is_dead, on_dead
        self._has_streams, self._is_lm_available = has_streams, is_lm_available
        self._thread = Periodic("voxlane-lm-watch", period_s, self.check)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._thread.stop()

    def check(self) -> bool:
        """One probe when it is due; True when it found the LM dead (and reported it)."""
        if not (self._has_streams() and self._is_lm_available()):
            return False
        if not self._is_dead():
            return False
        self._on_dead()
        return True
