"""The LM's time breakdown per run, from two scrapes of /metrics."""
from __future__ import annotations

import pytest

from clients.bench.server_time import add_server_times, metrics_url_for, parse, server_time

BEFORE = """# HELP voxlane_lm_decode_seconds_total x
voxlane_lm_prefill_seconds_total 1.0
voxlane_lm_decode_seconds_total 10.0
voxlane_lm_host_seconds_total 2.0
voxlane_lm_idle_seconds_total 100.0
voxlane_lm_step_batch_count 50
voxlane_lm_step_batch_sum 100
voxlane_lm_step_batch_bucket{le="4"} 50
voxlane_chunks_total{lane="urgent"} 3
"""
AFTER = BEFORE.replace("prefill_seconds_total 1.0", "prefill_seconds_total 2.0").replace(
    "decode_seconds_total 10.0", "decode_seconds_total 16.0").replace(
    "host_seconds_total 2.0", "host_seconds_total 3.0").replace(
    "idle_seconds_total 100.0", "idle_seconds_total 102.0").replace(
    "count 50", "count 150").replace("sum 100", "sum 500").replace('le="4"} 50', 'le="4"} 80')


def test_a_run_block_is_the_change_between_two_scrapes():
    block = server_time(parse(BEFORE), parse(AFTER))
    assert block["seconds"] == {"prefill": 1.0, "decode": 6.0, "host": 1.0, "idle": 2.0}
    assert block["share"] == {"prefill": 0.1, "decode": 0.6, "host": 0.1, "idle": 0.2}
    assert block["busy_share"] == {"prefill": 0.125, "decode": 0.75, "host": 0.125}
    assert block["num_steps"] == 100 and block["mean_step_batch"] == 4.0
    assert block["step_batch_le"] == {"4": 30}


def test_an_unreachable_server_gives_no_block():
    assert server_time(None, parse(AFTER)) is None
    assert add_server_times([None, None]) is None


def test_seeds_of_one_rate_pool_their_blocks():
    block = server_time(parse(BEFORE), parse(AFTER))
    pooled = add_server_times([block, block])
    assert pooled["seconds"]["decode"] == 12.0 and pooled["num_steps"] == 200
    assert pooled["mean_step_batch"] == pytest.approx(4.0) and pooled["share"]["decode"] == 0.6


def test_the_metrics_url_defaults_to_tritons_port_on_the_grpc_host():
    assert metrics_url_for("gpu-host:8001") == "http://gpu-host:8002/metrics"
