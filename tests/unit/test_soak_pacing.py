"""The soak's clients: closed loop, or paced to a rate (tools/soak.py run_workers), without a server."""
from __future__ import annotations

import threading
import time

import pytest

from tools.soak import MAX_OVERRUN, SoakTally, run_workers


def recorder(hold_s: float = 0.0, first_hold_s: float | None = None):
    """A request kind that notes when it starts and takes `hold_s` (the first, `first_hold_s`)."""
    starts, lock = [], threading.Lock()

    def run(url, rng, tally):
        with lock:
            starts.append(time.monotonic())
            first = len(starts) == 1
        time.sleep(first_hold_s if first and first_hold_s is not None else hold_s)
        tally.add("valid")
    return run, starts


def test_a_rate_bounds_the_requests_and_spreads_them():
    run, starts = recorder()
    tally = SoakTally()
    run_workers("unused", 1.0, 4, seed=0, tally=tally, kinds=[(run, 1.0)], rate=20.0)
    assert 16 <= len(starts) <= 24 and tally.counts["valid"] == len(starts)  # ~20 in the second, not thousands
    gaps = [b - a for a, b in zip(sorted(starts), sorted(starts)[1:])]
    assert max(gaps) < 0.15  # staggered across the workers (0.05 s apart), not four at once every 0.2 s


def test_without_a_rate_each_client_starts_its_next_request_as_its_last_ends():
    run, starts = recorder(hold_s=0.05)
    run_workers("unused", 0.5, 2, seed=0, tally=SoakTally(), kinds=[(run, 1.0)])
    assert len(starts) >= 12  # two clients, back to back: ~20


def test_a_slow_request_is_followed_at_once_and_with_no_burst():
    run, starts = recorder(first_hold_s=0.5)
    run_workers("unused", 1.0, 1, seed=0, tally=SoakTally(), kinds=[(run, 1.0)], rate=10.0)
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    assert gaps[0] < 0.58, gaps  # the next starts as the slow one ends (its turn, 0.1 s, is long past)
    assert all(g >= 0.07 for g in gaps[1:]), gaps  # then one a turn: no catching up on the turns it missed


def test_a_warm_up_bounded_by_work_goes_on_past_its_seconds_until_it_served_enough():
    run, starts = recorder(hold_s=0.1)
    tally = SoakTally()
    began = time.monotonic()
    run_workers("unused", 0.2, 2, seed=0, tally=tally, kinds=[(run, 1.0)], min_requests=12)
    assert tally.counts["valid"] >= 12 and time.monotonic() - began >= 0.55  # ~0.6 s: 12 of 0.1 s on 2 clients


def test_a_warm_up_bounded_by_work_stops_at_its_overrun_cap():
    run, starts = recorder(hold_s=0.1)
    tally = SoakTally()
    run_workers("unused", 0.2, 1, seed=0, tally=tally, kinds=[(run, 1.0)], min_requests=1000)
    assert tally.counts["valid"] <= 0.2 * MAX_OVERRUN / 0.1 + 1  # stopped at 0.6 s, not after 1000 (100 s)


@pytest.mark.parametrize("rate", [0.0, -1.0, float("nan")])
def test_a_rate_that_is_not_positive_is_refused(rate):
    with pytest.raises(ValueError, match="rate must be > 0"):
        run_workers("unused", 1.0, 1, seed=0, tally=SoakTally(), rate=rate)
