"""`voxlane plot`'s lanes figure: urgent share, queue and run per lane, and slack against rate."""
from __future__ import annotations

from pathlib import Path

from clients.bench.lanes import lane_delta, lanes_block, parse_lanes
from clients.bench.plot_lanes import has_lanes, lanes_path, plot_lanes
from tests.unit.test_bench_lanes import AFTER, BEFORE


def results(with_lanes: bool = True) -> dict:
    lanes = lanes_block(lane_delta(parse_lanes(BEFORE), parse_lanes(AFTER))) if with_lanes else None
    summaries = [{"rate": rate, "lanes": lanes} for rate in (1.0, 2.0)]
    summaries.append({"rate": 3.0, "lanes": None})  # a rate whose server was not scraped
    return {"server": {"mode": "voxlane"}, "summaries": summaries}


def test_the_lanes_figure_is_a_png(tmp_path):
    path = plot_lanes([results(), results()], tmp_path / "out" / "bench_lanes.png")
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_it_is_drawn_only_when_some_rate_has_lanes():
    assert has_lanes([results(False), results()]) and not has_lanes([results(False)])


def test_it_goes_beside_the_main_figure():
    assert lanes_path(Path("figs/bench.png")) == Path("figs/bench_lanes.png")
