"""Each seed's numbers beside the pooled ones, capacities per seed, and the bracketing search."""
import pytest

from clients.bench.records import Chunk, RequestRecord, Slo
from clients.bench.seeds import next_bracket_rate, per_seed, seed_capacities
from clients.bench.summary import RunWindow


def _record(i, ttfa):
    return RequestRecord(f"r{i}", "u", 0.0, 0.0, 1.0, (Chunk(0, ttfa, 0.5, "urgent"),), 1.0)


def test_per_seed_summarises_each_run_alone():
    good = RunWindow((_record(0, 0.05), _record(1, 0.05)), 1.0, 2.0)
    half = RunWindow((_record(2, 0.05), _record(3, 0.5)), 1.0, 2.0)
    rows = per_seed(2.0, [good, half], [0, 1], Slo(0.2))
    assert [r["seed"] for r in rows] == [0, 1]
    assert [r["slo_attainment"] for r in rows] == [1.0, 0.5]
    assert rows[1]["ttfa_ms"]["p99"] == pytest.approx(495.5) and rows[0]["goodput_rps"] == 2.0


def _summary(rate, attainments):
    return {"rate": rate, "per_seed": [{"seed": s, "slo_attainment": a} for s, a in enumerate(attainments)]}


def test_seed_capacities_give_each_seeds_capacity_and_the_spread():
    summaries = [_summary(10, [1.0, 1.0, 1.0]), _summary(12, [0.95, 0.85, 1.0]), _summary(14, [0.5, 0.5, 0.9])]
    caps = seed_capacities(summaries)["0.90"]
    assert caps["seeds"] == [0, 1, 2]
    assert caps["rates"] == pytest.approx([12 + 2 * 0.05 / 0.45, 10 + 2 * 0.1 / 0.15, 14.0], abs=1e-4)
    assert caps["lower_bound"] == [False, False, True]
    assert caps["min"] == pytest.approx(11.333, abs=1e-3) and caps["max"] == 14.0


def test_seed_capacities_skip_a_seed_missing_at_some_rate():
    summaries = [_summary(10, [1.0, 1.0]), _summary(12, [0.5])]
    assert seed_capacities(summaries)["0.90"]["seeds"] == [0]
    assert seed_capacities([{"rate": 1.0}])["0.90"]["rates"] == []  # no per-seed rows at all


def test_bracket_steps_up_past_the_highest_rate_that_meets_both_targets():
    assert next_bracket_rate([(30, 1.0)], 2) == 34


def test_bracket_steps_down_when_no_rate_meets_the_strict_target():
    assert next_bracket_rate([(30, 0.95)], 2) == 26  # 99 %: none meets → two widths below
    assert next_bracket_rate([(3, 0.5)], 2) == 1.5  # never below zero: halve instead


def test_bracket_bisects_a_wide_bracket_on_the_grid():
    assert next_bracket_rate([(26, 1.0), (30, 0.95), (34, 0.5)], 2) == 28  # 99 % lies in 26..30
    assert next_bracket_rate([(28, 1.0), (30, 0.95), (34, 0.5)], 2) == 32  # 99 % done, 90 % in 30..34


def test_bracket_is_done_when_each_capacity_lies_within_the_width():
    assert next_bracket_rate([(28, 1.0), (30, 0.95), (32, 0.5)], 2) is None
    assert next_bracket_rate([(28, 1.0), (30, 0.95), (32, 0.5)], 0) is None  # width 0: off
    assert next_bracket_rate([], 2) is None


def test_bracket_midpoints_stay_on_the_grid():
    assert next_bracket_rate([(20, 1.0), (27, 0.5)], 2) == 24  # the middle, 23.5, to the nearest multiple of 2
