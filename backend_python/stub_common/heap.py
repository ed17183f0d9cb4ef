"""Giving a model process's freed heap memory back to the OS, off the request path, after its batches.

glibc's malloc keeps the memory a process freed for reuse: after a codec batch of a new, larger
shape (a longer window, a bigger batch) the process's RSS stays at that batch's high-water mark,
and a long run ratchets it up shape by shape. `malloc_trim(0)` returns every free page of every
arena. Measured on the tiny codec (CPU, the router's batch sizes and window lengths): 150 batches
grew its RSS from 269 to 655 MB; trimmed (and without oneDNN's primitive cache, see
codec/model.py) from 226 to 264 MB, level at ~273 MB after 400 batches.
Without glibc (another libc) trimming is a no-op. The voice encoder meets a new shape with each
reference's length: 300 references of 1-4 s grew its RSS by 107 MB; trimmed and without the primitive
cache by 32 MB, level at +33 MB after 600.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
from typing import Callable

from backend_python.stub_common.periodic import Periodic


# oneDNN (torch's CPU convolutions) caches a primitive, with its buffers, per input shape, up to 1,024
# of them; a codec lane meets a new shape with each batch size and window length, and the voice encoder
# with each reference length, so the cache only grows (measured on the tiny codec: ~55 MB more after
# 150 batches of the router's shapes). Without it the same batches ran no slower.
ONEDNN_CACHE_CAPACITY = "0"


def bound_onednn_cache() -> None:
    """Turn oneDNN's primitive cache off unless an operator set its capacity; before oneDNN first runs."""
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", ONEDNN_CACHE_CAPACITY)


def _glibc_trim() -> Callable[[], object] | None:
    """glibc's `malloc_trim(0)`, or None where the C library has none."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    trim = getattr(libc, "malloc_trim", None)
    return None if trim is None else (lambda: trim(0))


class HeapTrimmer:
    """Trims the heap on its own thread once per `period_s` in which a batch ran, so the last batch's
    peak goes back too and no response waits for a trim. Once a second: each trim costs the next
    batch its page faults again."""

    def __init__(self, period_s: float = 1.0, trim: Callable[[], object] | None = None) -> None:
        self._trim = trim if trim is not None else _glibc_trim()
        self._has_run_batch = False  # a plain flag: set by the batch thread, cleared here; a lost race trims a tick later
        self._periodic = Periodic("voxlane-heap-trim", period_s, self.tick)

    def start(self) -> None:
        if self._trim is not None:
            self._periodic.start()

    def stop(self) -> None:
        if self._trim is not None:
            self._periodic.stop()

    def on_batch(self) -> None:
        """A batch ran: its freed memory is given back at the next tick."""
        self._has_run_batch = True

    def tick(self) -> bool:
        """Trim if a batch ran since the last tick; True when it did."""
        if self._trim is None or not self._has_run_batch:
            return False
        self._has_run_batch = False
        self._trim()
        return True
