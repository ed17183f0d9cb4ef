"""The lanes block per rate, from two scrapes of the router's /metrics."""
from __future__ import annotations

import pytest

from clients.bench.lanes import bucket_quantile, lane_delta, lanes_block, parse_lanes, pool

BEFORE = """# HELP voxlane_chunks_routed_total x
voxlane_chunks_routed_total{lane="urgent",reason="first_chunk"} 10
voxlane_chunks_routed_total{lane="urgent",reason="low_slack"} 0
voxlane_chunks_routed_total{lane="background",reason="slack_ok"} 30
voxlane_codec_run_ms_count{lane="urgent"} 10
voxlane_codec_run_ms_sum{lane="urgent"} 50
voxlane_codec_run_ms_bucket{lane="urgent",le="5"} 10
voxlane_codec_run_ms_bucket{lane="urgent",le="10"} 10
voxlane_codec_run_ms_bucket{lane="urgent",le="+Inf"} 10
voxlane_chunk_slack_ms_count 30
voxlane_chunk_slack_ms_sum 3000
voxlane_chunk_slack_ms_bucket{le="-100"} 0
voxlane_chunk_slack_ms_bucket{le="0"} 0
voxlane_chunk_slack_ms_bucket{le="100"} 10
voxlane_chunk_slack_ms_bucket{le="200"} 30
voxlane_chunk_slack_ms_bucket{le="+Inf"} 30
voxlane_lm_idle_seconds_total 5
voxlane_first_audio_phase_ms_count{phase="queue"} 2
voxlane_first_audio_phase_ms_sum{phase="queue"} 4
voxlane_first_audio_phase_ms_bucket{le="2",phase="queue"} 1
voxlane_first_audio_phase_ms_bucket{le="5",phase="queue"} 2
voxlane_first_audio_phase_ms_bucket{le="+Inf",phase="queue"} 2
"""
AFTER = """voxlane_chunks_routed_total{lane="urgent",reason="first_chunk"} 20
voxlane_chunks_routed_total{lane="urgent",reason="low_slack"} 30
voxlane_chunks_routed_total{lane="background",reason="slack_ok"} 80
voxlane_codec_run_ms_count{lane="urgent"} 50
voxlane_codec_run_ms_sum{lane="urgent"} 450
voxlane_codec_run_ms_bucket{lane="urgent",le="5"} 10
voxlane_codec_run_ms_bucket{lane="urgent",le="10"} 50
voxlane_codec_run_ms_bucket{lane="urgent",le="+Inf"} 50
voxlane_chunk_slack_ms_count 110
voxlane_chunk_slack_ms_sum 3000
voxlane_chunk_slack_ms_bucket{le="-100"} 40
voxlane_chunk_slack_ms_bucket{le="0"} 40
voxlane_chunk_slack_ms_bucket{le="100"} 90
voxlane_chunk_slack_ms_bucket{le="200"} 110
voxlane_chunk_slack_ms_bucket{le="+Inf"} 110
voxlane_first_audio_phase_ms_count{phase="queue"} 12
voxlane_first_audio_phase_ms_sum{phase="queue"} 34
voxlane_first_audio_phase_ms_bucket{le="2",phase="queue"} 1
voxlane_first_audio_phase_ms_bucket{le="5",phase="queue"} 12
voxlane_first_audio_phase_ms_bucket{le="+Inf",phase="queue"} 12
voxlane_first_audio_phase_ms_count{phase="prefill"} 10
voxlane_first_audio_phase_ms_sum{phase="prefill"} 80
voxlane_first_audio_phase_ms_bucket{le="5",phase="prefill"} 0
voxlane_first_audio_phase_ms_bucket{le="10",phase="prefill"} 10
voxlane_first_audio_phase_ms_bucket{le="+Inf",phase="prefill"} 10
voxlane_first_audio_phase_ms_count{phase="lm"} 0
"""


def block():
    return lanes_block(lane_delta(parse_lanes(BEFORE), parse_lanes(AFTER)))


def test_the_urgent_share_per_reason_is_the_change_between_two_scrapes():
    lanes = block()
    assert lanes["routed"] == {"urgent": {"first_chunk": 10, "low_slack": 30}, "background": {"slack_ok": 50}}
    assert lanes["num_chunks"] == 90
    assert lanes["urgent_share"] == {"first_chunk": pytest.approx(0.1111), "low_slack": pytest.approx(0.3333)}
    assert lanes["urgent_share_total"] == pytest.approx(0.4444)


def test_queue_and_run_per_lane_come_from_the_histogram_buckets():
    run = block()["run_ms"]["urgent"]  # 40 new calls, all in (5, 10]
    assert run == {"count": 40, "mean": 10.0, "p50": 7.5, "p90": 9.5}
    assert block()["queue_ms"]["background"] == {"count": 0, "mean": None, "p50": None, "p90": None}


def test_slack_quantiles_reach_below_zero():
    slack = block()["slack_ms"]  # 80 new chunks: 40 at or below -100 ms, 40 in (0, 100], 0 in (100, 200]
    assert slack["count"] == 80 and slack["p10"] == -100.0
    assert slack["p90"] == pytest.approx(80.0)  # rank 72: 32 of the 40 in (0, 100]


def test_the_first_audio_phases_come_in_path_order_with_the_ones_no_request_took_left_out():
    phases = block()["first_audio_ms"]  # 10 new requests each
    assert list(phases) == ["queue", "prefill"]  # path order, not the scrape's; `lm` saw none
    assert phases["queue"] == {"count": 10, "mean": 3.0, "p50": 3.5, "p90": 4.7}  # all 10 in (2, 5]
    assert phases["prefill"] == {"count": 10, "mean": 8.0, "p50": 7.5, "p90": 9.5}


def test_seeds_of_one_rate_pool_their_deltas():
    delta = lane_delta(parse_lanes(BEFORE), parse_lanes(AFTER))
    pooled = lanes_block(pool([delta, None, delta]))
    assert pooled["num_chunks"] == 180 and pooled["urgent_share"] == block()["urgent_share"]
    assert pooled["run_ms"]["urgent"]["p50"] == 7.5


def test_an_unreachable_server_gives_no_block():
    assert lane_delta(None, parse_lanes(AFTER)) is None
    assert lanes_block(pool([None])) is None


def test_bucket_quantile_follows_prometheus():
    buckets = [(1.0, 2.0), (2.0, 4.0), (float("inf"), 5.0)]
    assert bucket_quantile(0.2, buckets) == pytest.approx(0.5)  # first bucket starts at 0
    assert bucket_quantile(0.6, buckets) == pytest.approx(1.5)
    assert bucket_quantile(0.99, buckets) == 2.0  # in +Inf: the largest finite bound
    assert bucket_quantile(0.5, [(-5.0, 3.0), (0.0, 4.0)]) == -5.0  # a non-positive first bound is the answer
    assert bucket_quantile(0.5, [(1.0, 0.0)]) is None
