"""`voxlane plot`: bands over seeds on the curves, and the capacity figure."""
from clients.bench.plot import plot_results, seed_band
from clients.bench.plot_capacity import plot_capacity
from clients.bench.plot_past import PANELS, plot_past


def _summary(rate, attainments):
    rows = [{"seed": i, "slo_attainment": a, "goodput_rps": a * rate, "ttfa_ms": {"p50": 50.0, "p99": 100.0 + i},
             "completed_rps": 0.9 * rate - i, "stall_rate": 0.01 * i} for i, a in enumerate(attainments)]
    pooled = sum(attainments) / len(attainments)
    return {"rate": rate, "slo_attainment": pooled, "goodput_rps": pooled * rate, "ttfa_ms": {"p99": 101.0},
            "completed_rps": 0.9 * rate - 1, "stall_rate": 0.01, "per_seed": rows}


def _result(label):
    summaries = [_summary(10.0, [1.0, 0.98, 1.0]), _summary(12.0, [0.9, 0.7, 0.8])]
    cap = {"0.90": {"rate": 11.0}, "0.99": {"rate": 10.0}}
    per_seed = {"0.90": {"rates": [12.0, 10.5, 11.0], "lower_bound": [True, False, False]},
                "0.99": {"rates": [10.0], "lower_bound": [False]}}
    return {"label": label, "server": {"mode": "voxlane"}, "slo": {"ttfa_ms": 200.0}, "summaries": summaries,
            "capacity": cap, "capacity_per_seed": per_seed}


def test_the_band_spans_each_rates_seeds():
    lows, highs = seed_band(_result("a")["summaries"], lambda row: row["slo_attainment"])
    assert lows == [0.98, 0.7] and highs == [1.0, 0.9]


def test_no_band_when_a_rate_has_one_seed():
    summaries = _result("a")["summaries"]
    summaries[1]["per_seed"] = summaries[1]["per_seed"][:1]
    assert seed_band(summaries, lambda row: row["slo_attainment"]) is None
    assert seed_band([{"rate": 1.0}], lambda row: row["slo_attainment"]) is None


def test_curves_with_bands_and_the_capacity_figure_are_pngs(tmp_path):
    assert plot_results([_result("a"), _result("b")], tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"
    assert plot_capacity([_result("a"), _result("b")], tmp_path / "cap.png").read_bytes()[:4] == b"\x89PNG"


def test_the_past_capacity_figure_is_a_png_with_completed_attainment_and_stalls(tmp_path):
    assert [title.split()[0] for title, _ in PANELS] == ["completed", "SLO", "stall"]
    lows, highs = seed_band(_result("a")["summaries"], PANELS[0][1])
    assert lows == [7.0, 8.8] and highs == [9.0, 10.8]  # completed req/s over the seeds
    assert plot_past([_result("a"), _result("b")], tmp_path / "past.png").read_bytes()[:4] == b"\x89PNG"
