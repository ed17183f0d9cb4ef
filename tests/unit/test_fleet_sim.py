"""tools.fleet_sim against the scaling rule worked out by hand: a step up is seen one scrape late at the next poll,
served one start-up later, at most doubling per poll; a step down waits out the scale-in window, removes pods at the
allowed rate, and each leaving pod is held until its streams end. And the doc's tables are the simulation's."""
from __future__ import annotations

import math
from pathlib import Path

from tools.fleet_sim import ScalerConfig, Workload, day_table, simulate, step, step_table

# streams of exactly one second: the live streams are the arrival rate, at once
ONE_SECOND = Workload("one-second", 1.0, 1.0, 1.0, capacity_rps=10.0)
CONFIG = ScalerConfig(target=0.5, admission_limit=10, poll_s=15, metric_lag_s=15, start_s=120, leave_s=15,
                      scale_in_window_s=300, scale_in_pods_per_min=2)
DEPLOY = Path(__file__).resolve().parents[2] / "docs" / "DEPLOY.md"


def pods(live: float) -> int:
    return math.ceil(live / (CONFIG.target * CONFIG.admission_limit))


def test_a_step_up_is_served_a_scrape_a_poll_and_a_start_up_later_doubling_per_poll():
    run = simulate(ONE_SECOND, step(20, 100, at_s=300), 600, CONFIG, seed=None)
    before, after = pods(20), pods(100)  # 4, 20
    seen = 300 + CONFIG.metric_lag_s  # the first poll whose (lagged) reading has the step: 315
    assert run.serving[seen + CONFIG.start_s - 1] == before
    grown = [run.serving[seen + CONFIG.start_s + i * CONFIG.poll_s] for i in range(3)]
    assert grown == [2 * before, 4 * before, after]  # +4 (doubling), +8 (doubling), then the last 4
    assert run.serving[-1] == after
    # 100 streams need 10 pods' capacity: past it from the step until the second growth (16 pods) serves
    assert math.ceil(100 / ONE_SECOND.capacity_streams) > 2 * before
    assert run.over_s == seen + CONFIG.start_s + CONFIG.poll_s - 300


def test_a_step_down_waits_out_the_window_then_removes_pods_at_the_rate_and_holds_each_while_it_drains():
    run = simulate(ONE_SECOND, step(100, 20, at_s=1000), 1400, CONFIG, seed=None)
    # the last ask for 20 pods reads the load before the step (at 1000); it leaves the window after 1300: the first
    # poll past it, 1305, removes 2 pods (the rate), the poll a minute later 2 more
    assert run.serving[1304] == pods(100) and run.serving[1305] == pods(100) - 2
    assert run.serving[1364] == pods(100) - 2 and run.serving[1365] == pods(100) - 4
    held_s = CONFIG.leave_s + 1  # each leaving pod: the wait to leave, then its one-second streams
    assert run.drain_gpu_s == 4 * held_s


def test_the_same_seed_gives_the_same_fleet_and_another_seed_another():
    workload = Workload("w", 4.0, 5.5, 6.0, 43.5)
    runs = [simulate(workload, step(300, 600, 600), 1200, ScalerConfig(), seed) for seed in (7, 7, 8)]
    assert runs[0].serving == runs[1].serving and runs[0].gpu_s == runs[1].gpu_s
    assert runs[0].stream_s != runs[2].stream_s


def test_the_deploy_doc_holds_the_simulations_tables():
    doc = DEPLOY.read_text()
    for line in day_table(seed=1) + step_table(seed=1):
        assert line in doc, line
