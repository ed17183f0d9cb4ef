"""Notices a lane whose process died (the LM, a codec lane), and reports it once.

A stream's worker waits for the LM's next chunk on the chunk channel; when the LM's Python stub
dies, nothing more comes, so the stream would wait forever; a dead codec lane would fail the next chunk
sent to it. This thread probes the lane every `period_s` while it is in service (the router looks for
the lane's stub process in /proc: no request to it, since every BLS request made at runtime costs
tritonserver memory in Triton 2.51); a probe that finds the stub gone calls `on_dead()` once (the router
ends the LM's streams with a clear error, or reloads a codec lane). Probing resumes when
`is_lane_available()` says the lane was loaded again. It probes with no stream live too: a watch that first
looked once a stream was live could meet a stub killed just before, never learn that it had lived, and leave
that stream waiting for good.
"""
from __future__ import annotations

from typing import Callable

from backend_python.stub_common.periodic import Periodic


class LaneWatch:
    def __init__(self, is_dead: Callable[[], bool], on_dead: Callable[[], None],
                 is_lane_available: Callable[[], bool], period_s: float = 1.0, name: str = "lm") -> None:
        """`is_dead()` probes the lane's process (StubWatch.is_dead); `name` names its thread."""
        self._is_dead, self._on_dead = is_dead, on_dead
        self._is_lane_available = is_lane_available
        self._thread = Periodic(f"voxlane-{name}-watch", period_s, self.check)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._thread.stop()

    def check(self) -> bool:
        """One probe when it is due; True when it found the lane dead (and reported it)."""
        if not self._is_lane_available():
            return False
        if not self._is_dead():
            return False
        self._on_dead()
        return True
