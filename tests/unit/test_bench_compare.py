"""What `voxlane compare` runs: one server per mode, partitioned modes once per codec share."""
from __future__ import annotations

from pathlib import Path

import pytest

from server.compare import CompareConfig, compare_report
from clients.bench.config import BenchConfig

BENCH = BenchConfig(url="unused:0", out=Path("unused"))


def test_default_runs_are_one_per_mode():
    config = CompareConfig(bench=BENCH, modes=("timeshare", "voxlane"), device="cuda")
    assert [label for label, _ in config.runs()] == ["timeshare", "voxlane"]


def test_codec_shares_split_the_partitioned_modes_only():
    config = CompareConfig(bench=BENCH, modes=("timeshare", "colocate", "partition", "voxlane"), device="cuda",
                           codec_sm_pcts=(15, 40))
    runs = dict(config.runs())
    assert list(runs) == ["timeshare", "colocate", "partition@c15", "partition@c40", "voxlane@c15", "voxlane@c40"]
    assert (runs["voxlane@c15"].codec_sm_pct, runs["voxlane@c15"].lm_sm_pct) == (15, 85)
    assert runs["voxlane@c40"].sm_percentage("codec") == 40
    assert runs["voxlane@c40"].sm_percentage("codec_urgent") == 100
    assert runs["timeshare"].sm_percentage("codec") == 100


def test_codec_shares_on_cpu_change_nothing():
    config = CompareConfig(bench=BENCH, modes=("voxlane",), device="cpu", codec_sm_pcts=(15, 40))
    assert [label for label, _ in config.runs()] == ["voxlane"]


@pytest.mark.parametrize("pct", [0, 100, 150])
def test_codec_share_out_of_range_is_refused(pct):
    with pytest.raises(ValueError, match="codec-sm-pcts"):
        CompareConfig(bench=BENCH, codec_sm_pcts=(pct,))


def test_ratio_is_against_timeshare():
    def result(rate90, rate99):
        return {"capacity": {"0.90": {"rate": rate90, "is_lower_bound": False},
                             "0.99": {"rate": rate99, "is_lower_bound": False}}, "summaries": []}
    report = compare_report({"timeshare": result(2.0, None), "voxlane@c25": result(8.0, 4.0)})
    assert report["modes"]["voxlane@c25"]["ratio_to_baseline"] == {"0.90": 4.0, "0.99": None}


def test_free_ports_are_distinct_bindable_and_below_the_ephemeral_range(tmp_path, monkeypatch):
    """Outgoing connections take their local ports from the ephemeral range: a server given one of those may find
    it taken by the time it binds, so test and benchmark servers get ports from below it."""
    import socket

    from server import compare
    monkeypatch.setattr(compare, "EPHEMERAL_RANGE", tmp_path / "range")
    (tmp_path / "range").write_text("32768\t60999\n")
    ports = compare.free_ports(5)
    assert len(set(ports)) == 5 and all(compare.LOWEST_PORT <= port < 32768 for port in ports), ports
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
    (tmp_path / "range").write_text(f"{compare.LOWEST_PORT + 10}\t60999\n")  # no room below: the kernel's picks
    assert len(set(compare.free_ports(3))) == 3
