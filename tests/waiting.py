"""Waiting in tests for something another thread or process does."""
from __future__ import annotations

import time
from typing import Callable


def wait_for(predicate: Callable[[], bool], timeout_s: float = 5.0, poll_s: float = 0.01) -> bool:
    """Whether `predicate()` became true within `timeout_s` (polled every `poll_s`)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(poll_s)
    return True
