"""The Grafana dashboard is importable as written: valid PromQL, unique panel ids, the datasource a variable."""
from __future__ import annotations

import promql_parser

from tests import dashboard


def test_every_query_parses_as_promql():
    exprs = dashboard.queries(dashboard.load())
    assert len(exprs) >= 20
    for expr in exprs:
        promql_parser.parse(expr)  # raises ValueError on a malformed query


def test_panels_have_unique_ids_fit_the_grid_and_read_the_chosen_datasource():
    board = dashboard.load()
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in board["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24
        for target in panel.get("targets", []):
            assert target["datasource"]["uid"] == "${datasource}"
            assert '{job=~"$job"}' in target["expr"]  # scoped to the chosen deployment
    assert {v["name"] for v in board["templating"]["list"]} == {"datasource", "job"}


def test_the_dashboard_covers_the_listener_lanes_load_and_triton():
    names = dashboard.metric_names(dashboard.queries(dashboard.load()))
    assert {"voxlane_ttfa_ms_bucket", "voxlane_first_audio_phase_ms_bucket", "voxlane_stalls_total", "voxlane_chunks_total", "voxlane_live_requests",
            "voxlane_lm_batch_size", "voxlane_admission_limit", "nv_inference_queue_duration_us",
            "nv_inference_compute_infer_duration_us"} <= names
