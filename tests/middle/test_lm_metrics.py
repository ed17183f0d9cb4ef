"""The LM lane's own gauges: its admission limit, exported once beside the router's live streams (the chart's
autoscaler divides the two), and its batch size, sent only when it changes."""
from __future__ import annotations

from protocol.metrics import ADMISSION_LIMIT_METRIC, LIVE_METRIC


def gauge(metrics, name: str) -> list[float]:
    return [m.value for f in metrics._families if f.name == name for m in f.metrics]


def test_the_admission_limit_is_the_lanes_slots_and_steps_leave_it_alone(pb):
    from backend_python.stub_common.metrics import LMMetrics
    metrics = LMMetrics(admission_limit=64)
    assert gauge(metrics, ADMISSION_LIMIT_METRIC) == [64]
    metrics.on_step(12)
    assert gauge(metrics, ADMISSION_LIMIT_METRIC) == [64]
    assert gauge(metrics, "voxlane_lm_batch_size") == [12]


def test_the_limit_is_named_apart_from_the_live_streams_it_divides():
    """The gateway and `voxlane serve` read LIVE_METRIC by prefix: the limit's name must not extend it."""
    assert not ADMISSION_LIMIT_METRIC.startswith(LIVE_METRIC) and ADMISSION_LIMIT_METRIC.startswith("voxlane_")
