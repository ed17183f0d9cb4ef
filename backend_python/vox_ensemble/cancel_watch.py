"""Notices cancelled streams between chunks and has the LM drop them at once.

A stream's own thread waits for the LM's next chunk on the chunk channel, so it sees a
cancellation only when the LM sends its next chunk: a request still waiting
for an LM slot would keep its place in the queue, and be prefilled, before
anyone noticed its client had gone. This one thread polls every live stream's
sender instead and calls `on_cancel(stream_id)` once for each that was cancelled.

`remove(stream_id)` must come before the stream's final response: asking a
sender whether it was cancelled after its final response crashed tritonserver
(the response factory is freed with the final flag), so `remove` waits for a
poll in progress and no poll follows it.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Callable

from backend_python.stub_common.periodic import Periodic

log = logging.getLogger("voxlane.router")


@dataclass
class _Watched:
    is_cancelled: Callable[[], bool]  # the stream's sender.is_cancelled
    is_removed: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)  # held while polling, and by remove

    def poll(self) -> bool:
        with self.lock:
            return not self.is_removed and self.is_cancelled()

    def close(self) -> None:
        with self.lock:
            self.is_removed = True


class CancelWatch:
    def __init__(self, on_cancel: Callable[[str], None], period_s: float = 0.2) -> None:
        self._on_cancel = on_cancel
        self._lock = threading.Lock()
        self._live: dict[str, _Watched] = {}
        self._thread = Periodic("voxlane-cancel-watch", period_s, self._poll)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._thread.stop()

    def add(self, stream_id: str, is_cancelled: Callable[[], bool]) -> None:
        with self._lock:
            self._live[stream_id] = _Watched(is_cancelled)

    def remove(self, stream_id: str) -> None:
        """Stop watching; once this returns, the stream's sender is not polled again."""
        with self._lock:
            watched = self._live.pop(stream_id, None)
        if watched is not None:
            watched.close()

    @property
    def num_watched(self) -> int:
        with self._lock:
            return len(self._live)

    def _poll(self) -> None:
        for stream_id in self._cancelled_now():
            try:
                self._on_cancel(stream_id)
            except Exception:  # one failed cancel must not stop the watch for the others
                log.exception("cancelling stream %s failed", stream_id)

    def _cancelled_now(self) -> list[str]:
        """Cancelled streams, removed from the watch (each is reported once)."""
        with self._lock:
            live = list(self._live.items())
        cancelled = [stream_id for stream_id, watched in live if watched.poll()]
        with self._lock:
            for stream_id in cancelled:
                self._live.pop(stream_id, None)
        return cancelled
