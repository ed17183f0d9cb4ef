"""The router's live streams, each ended exactly once.

A stream normally ends in its own worker thread (with the `Ended` its relay returns). When the LM's
process dies the LM watch ends every stream from its thread at once (and wakes their workers). Both go through `end`: the first caller sends the final response,
later ones do nothing, and a chunk is only sent while the stream is not ended (under the same lock),
so nothing follows a final response.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Callable

from protocol.reasons import Ended


@dataclass
class _Live:
    lock: threading.Lock = field(default_factory=threading.Lock)
    is_ended: bool = False


class LiveStreams:
    def __init__(self, finish: Callable[[object, Ended], None]) -> None:
        """`finish(job, ended)` sends a stream's final response (and its bookkeeping)."""
        self._finish = finish
        self._lock = threading.Lock()
        self._live: dict[str, tuple[object, _Live]] = {}

    def add(self, stream_id: str, job: object) -> None:
        with self._lock:
            self._live[stream_id] = (job, _Live())

    def __len__(self) -> int:
        with self._lock:
            return len(self._live)

    def send(self, stream_id: str, send: Callable[[], None]) -> bool:
        """Run `send` unless the stream has ended; False when it has (nothing was sent)."""
        entry = self._entry(stream_id)
        if entry is None:
            return False
        with entry[1].lock:
            if entry[1].is_ended:
                return False
            send()
            return True

    def is_cancelled(self, stream_id: str, is_cancelled: Callable[[], bool]) -> bool:
        """`is_cancelled()` (the sender's) while the stream is live; True once it has ended, without
        asking: after a final response the sender must not be asked (that crashed tritonserver)."""
        entry = self._entry(stream_id)
        if entry is None:
            return True
        with entry[1].lock:
            return entry[1].is_ended or is_cancelled()

    def end(self, stream_id: str, ended: Ended) -> bool:
        """End the stream as `ended` says; False when it had ended already."""
        entry = self._entry(stream_id)
        if entry is None:
            return False
        job, live = entry
        with live.lock:
            if live.is_ended:
                return False
            live.is_ended = True
            with self._lock:
                self._live.pop(stream_id, None)
            self._finish(job, ended)
        return True

    def end_all(self, ended: Ended) -> int:
        """End every live stream as `ended` says; how many this call ended."""
        with self._lock:
            ids = list(self._live)
        return sum(self.end(stream_id, ended) for stream_id in ids)

    def _entry(self, stream_id: str):
        with self._lock:
            return self._live.get(stream_id)
