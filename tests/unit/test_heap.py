"""HeapTrimmer: trims when asked, at most once per interval; a no-op without a trim function."""
from backend_python.triton.heap import HeapTrimmer, _glibc_trim


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_trims_at_most_once_per_interval():
    clock, calls = FakeClock(), []
    trimmer = HeapTrimmer(min_interval_s=1.0, clock=clock, trim=lambda: calls.append(clock.now))
    assert trimmer.maybe_trim()  # the first call trims
    clock.now += 0.5
    assert not trimmer.maybe_trim()
    clock.now += 0.5
    assert trimmer.maybe_trim()
    assert calls == [100.0, 101.0]


def test_glibc_trim_runs_here():
    trim = _glibc_trim()  # the test machines run glibc
    assert trim is not None
    trim()
    assert HeapTrimmer(min_interval_s=0.0).maybe_trim()
