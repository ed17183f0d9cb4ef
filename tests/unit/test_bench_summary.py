"""Per-rate summaries agree with the records; capacity interpolates between the bracketing rates."""
import pytest

from clients.bench.records import Chunk, RequestRecord, Slo
from clients.bench.summary import RunWindow, capacity, capacities, next_search_rate, summarize_rate


def _record(i, ttfa, stall=0.0, error=None):
    chunks = () if ttfa is None else (Chunk(0, ttfa, 0.5, "urgent"), Chunk(1, ttfa + 0.5 + stall, 0.5, "background"))
    return RequestRecord(f"r{i}", "u", 0.0, 0.0, 1.0, chunks, 2.0, error)


def test_summary_counts_percentiles_goodput_and_throughput():
    records = (_record(0, 0.05), _record(1, 0.10), _record(2, 0.30), _record(3, 0.05, stall=0.2),
               _record(4, None, error="bad voice"))
    s = summarize_rate(2.0, [RunWindow(records, window_s=2.5, wall_s=4.0)], Slo(0.2))
    assert (s["num_requests"], s["num_completed"], s["num_errors"]) == (5, 4, 1)
    assert s["num_slo_met"] == 2 and s["slo_attainment"] == pytest.approx(0.4)
    assert s["goodput_rps"] == pytest.approx(2 / 2.5) and s["completed_rps"] == pytest.approx(4 / 4.0)
    assert s["offered_rps"] == pytest.approx(2.0)
    assert s["num_stalled"] == 1 and s["stall_rate"] == pytest.approx(0.25) and s["stall_s_total"] == pytest.approx(0.2)
    assert s["ttfa_ms"]["p50"] == pytest.approx(75.0)  # of 50, 50, 100, 300 ms
    assert s["ttfa_ms"]["p95"] == pytest.approx(270.0)  # linear between 100 and 300


def test_runs_of_several_seeds_pool():
    a = RunWindow((_record(0, 0.05),), 1.0, 2.0)
    b = RunWindow((_record(1, 0.5),), 1.0, 2.0)
    s = summarize_rate(1.0, [a, b], Slo(0.2))
    assert s["num_runs"] == 2 and s["slo_attainment"] == 0.5 and s["goodput_rps"] == 0.5


def test_capacity_interpolates_between_bracketing_rates():
    points = [(1.0, 1.0), (2.0, 0.95), (4.0, 0.55), (8.0, 0.1)]
    cap = capacity(points, 0.9)
    assert cap["bracket"] == [2.0, 4.0] and not cap["is_lower_bound"]
    assert cap["rate"] == pytest.approx(2.0 + 2.0 * 0.05 / 0.40)
    assert capacity(points, 0.99)["rate"] == pytest.approx(1.0 + 0.01 / 0.05)


def test_capacity_at_the_edges():
    assert capacity([(1.0, 1.0), (2.0, 0.92)], 0.9) == {"target": 0.9, "rate": 2.0, "bracket": [2.0, None],
                                                       "is_lower_bound": True}
    assert capacity([(1.0, 0.5), (2.0, 0.2)], 0.9)["rate"] == 0.0
    assert capacity([(4.0, 0.9), (1.0, 1.0), (8.0, 0.0)], 0.9)["rate"] == 4.0  # unordered, exact hit
    assert capacity([], 0.9)["rate"] is None


def test_capacity_takes_the_highest_rate_that_meets_the_target():
    cap = capacity([(1.0, 0.85), (2.0, 1.0), (4.0, 0.5)], 0.9)  # a noisy low rate does not hide 2/s
    assert cap["bracket"] == [2.0, 4.0] and cap["rate"] == pytest.approx(2.4)


def test_search_bisects_the_bracket_or_widens_it():
    assert next_search_rate([(1.0, 1.0), (4.0, 0.5)], 0.9) == 2.5
    assert next_search_rate([(1.0, 1.0), (2.0, 1.0)], 0.9) == 4.0
    assert next_search_rate([(2.0, 0.5)], 0.9) == 1.0


def test_capacities_reads_summaries():
    caps = capacities([{"rate": 1.0, "slo_attainment": 1.0}, {"rate": 2.0, "slo_attainment": 0.0}])
    assert caps["0.90"]["rate"] == pytest.approx(1.1) and caps["0.99"]["rate"] == pytest.approx(1.01)
