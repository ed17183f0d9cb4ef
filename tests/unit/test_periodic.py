"""The periodic thread the watches and the LM's metric export run on: a failing tick does not end it."""
from __future__ import annotations

import threading

from backend_python.stub_common.periodic import Periodic


def test_ticks_go_on_after_a_failing_tick_and_stop_on_request():
    calls, enough = [], threading.Event()

    def tick():
        calls.append(len(calls))
        if len(calls) == 1:
            raise RuntimeError("the first tick fails")
        if len(calls) >= 3:
            enough.set()

    periodic = Periodic("test-periodic", 0.01, tick)
    periodic.start()
    assert enough.wait(5.0)
    periodic.stop()
    stopped_at = len(calls)
    assert not periodic._thread.is_alive() and len(calls) == stopped_at
