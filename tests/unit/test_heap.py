"""HeapTrimmer: trims once per tick in which a batch ran, never otherwise; glibc's trim is found here."""
import time

from backend_python.stub_common.heap import HeapTrimmer, _glibc_trim


def test_trims_only_after_a_batch():
    calls = []
    trimmer = HeapTrimmer(trim=lambda: calls.append(1))
    assert not trimmer.tick()  # no batch yet
    trimmer.on_batch()
    trimmer.on_batch()
    assert trimmer.tick()  # one trim for both batches
    assert not trimmer.tick()
    assert calls == [1]


def test_its_thread_trims_after_the_last_batch():
    calls = []
    trimmer = HeapTrimmer(period_s=0.05, trim=lambda: calls.append(1))
    trimmer.start()
    try:
        trimmer.on_batch()
        deadline = time.monotonic() + 5
        while not calls and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        trimmer.stop()
    assert calls == [1]


def test_glibc_trim_is_found_and_runs():
    trim = _glibc_trim()  # the test machines run glibc
    assert trim is not None
    trim()
