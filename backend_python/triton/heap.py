"""Giving a model process's freed heap memory back to the OS, at most once per interval.

glibc's malloc keeps the memory a process freed for reuse: after a codec batch of a new, larger
shape (a longer window, a bigger batch) the process's RSS stays at that batch's high-water mark,
and a long run ratchets it up shape by shape. `malloc_trim(0)` returns every free page of every
arena. Measured on the tiny codec (CPU, the router's batch sizes and window lengths): 150 batches
grew its RSS from 269 to 655 MB; trimmed (and without oneDNN's primitive cache, see
codec_lane/model.py) from 226 to 264 MB, level at ~273 MB after 400 batches.
Without glibc (another libc) trimming is a no-op.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import time
from typing import Callable


def _glibc_trim() -> Callable[[], object] | None:
    """glibc's `malloc_trim(0)`, or None where the C library has none."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    trim = getattr(libc, "malloc_trim", None)
    return None if trim is None else (lambda: trim(0))


class HeapTrimmer:
    """Calls `trim` when asked, unless it ran less than `min_interval_s` ago (each trim costs the next
    batch its page faults, so a busy lane trims about once a second, not after every batch)."""

    def __init__(self, min_interval_s: float = 1.0, clock: Callable[[], float] = time.monotonic,
                 trim: Callable[[], object] | None = None) -> None:
        self._min_interval_s = min_interval_s
        self._clock = clock
        self._trim = trim if trim is not None else _glibc_trim()
        self._last = float("-inf")

    def maybe_trim(self) -> bool:
        """Trim now if the interval has passed; True when it did."""
        now = self._clock()
        if self._trim is None or now - self._last < self._min_interval_s:
            return False
        self._last = now
        self._trim()
        return True
