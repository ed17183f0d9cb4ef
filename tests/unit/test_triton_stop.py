"""`TritonProcess.stop` on a tritonserver that hangs in its own teardown after its exit timeout."""
from __future__ import annotations

import signal
import subprocess
import sys
import time

from server.triton_launch import EXIT_HANG_S, EXIT_TIMEOUT_S, TritonProcess, shm_prefix


def test_a_tritonserver_that_hangs_past_its_exit_timeout_is_killed_then_not_after_the_whole_grace(tmp_path):
    """A stand-in that ignores SIGTERM, as a tritonserver hung in its teardown after "Exit timeout expired. Exiting
    immediately." did: `stop` kills it EXIT_HANG_S after the exit timeout, not after the caller's 20 s grace."""
    hung = object.__new__(TritonProcess)
    hung._log, hung.region_prefix, hung._marks = None, shm_prefix(), tmp_path / "marks"
    ready = tmp_path / "ready"
    hung.process = subprocess.Popen(
        [sys.executable, "-c", "import pathlib, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                               "pathlib.Path(sys.argv[1]).touch(); time.sleep(60)", str(ready)],
        start_new_session=True)
    while not ready.exists():
        time.sleep(0.05)
    started = time.monotonic()
    assert hung.stop(grace_s=20.0) == -signal.SIGKILL
    assert time.monotonic() - started < 20.0 - EXIT_TIMEOUT_S - EXIT_HANG_S  # not the whole grace
