"""The routing levers: a budget of in-flight urgent work, and a margin from a latency quantile."""
import pytest

from scheduler import ROUTES, ChunkRouter, Lane, LatencyEstimator, PlaybackClock, RouteReason, SchedulerConfig

from tests.unit.test_scheduler_routing import FakeClock, make_router, playing_clock


def late_chunk(router: ChunkRouter, urgent_in_flight: int):
    """Chunk 1 of a stream whose chunk 0 started 0.7 s ago: slack 0.05 < margin 0.10 (low slack)."""
    fake = FakeClock()
    clock = playing_clock(fake.t, [0.8, 0.8])
    return router.route(clock, 1, fake.advance(0.7), urgent_in_flight=urgent_in_flight)


def test_a_low_slack_chunk_that_finds_the_budget_used_up_goes_background():
    router, _ = make_router(urgent_budget=2)
    below, full, over = (late_chunk(router, n) for n in (1, 2, 5))
    assert (below.lane, below.reason) == (Lane.URGENT, RouteReason.LOW_SLACK)
    for decision in (full, over):
        assert (decision.lane, decision.reason) == (Lane.BACKGROUND, RouteReason.URGENT_FULL)
        assert (decision.lane, decision.reason) in ROUTES
        assert decision.slack_s == pytest.approx(0.05) and decision.margin_s == pytest.approx(0.10)


def test_first_chunks_stay_urgent_whatever_the_budget():
    router, _ = make_router(urgent_budget=1)
    decision = router.route(PlaybackClock(), 0, now=0.0, urgent_in_flight=10)
    assert (decision.lane, decision.reason) == (Lane.URGENT, RouteReason.FIRST_CHUNK)


def test_no_budget_by_default_and_slack_ok_chunks_are_untouched():
    unbounded, _ = make_router()
    assert late_chunk(unbounded, 100).lane is Lane.URGENT
    bounded, _ = make_router(urgent_budget=1)
    clock = playing_clock(0.0, [0.8, 0.8])
    decision = bounded.route(clock, 1, now=0.1, urgent_in_flight=0)
    assert decision.reason is RouteReason.SLACK_OK


def test_the_quantile_margin_covers_the_tail_beyond_the_mean():
    """margin = floor + safety * (q-quantile - mean): a narrow latency spread routes fewer chunks urgent
    than the mean-scaled margin, a long tail more."""
    narrow, narrow_est = make_router(floor=0.05, margin_quantile=0.9, latency_alpha=1.0)
    for seconds in (0.20, 0.21, 0.19, 0.20):
        narrow_est.observe(Lane.BACKGROUND, 1, seconds)  # the EWMA with alpha 1 is the last: 0.20
    assert narrow.margin(1) == pytest.approx(0.05 + 0.01)
    mean_scaled, mean_est = make_router(floor=0.05, latency_alpha=1.0)
    mean_est.observe(Lane.BACKGROUND, 1, 0.20)
    assert mean_scaled.margin(1) == pytest.approx(0.25)
    clock = playing_clock(0.0, [0.8, 0.8])
    assert narrow.route(clock, 1, now=0.45).lane is Lane.BACKGROUND  # slack 0.15: above 0.06
    assert mean_scaled.route(clock, 1, now=0.45).lane is Lane.URGENT  # below 0.25
    tail, tail_est = make_router(floor=0.05, margin_quantile=0.95, latency_alpha=1.0)  # 10th of 10
    for seconds in (0.6, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1):
        tail_est.observe(Lane.BACKGROUND, 1, seconds)
    assert tail.margin(1) == pytest.approx(0.05 + 0.6 - 0.1)


def test_the_quantile_margin_is_never_below_the_floor():
    router, estimator = make_router(floor=0.05, margin_quantile=0.5, latency_alpha=1.0)
    for seconds in (0.1, 0.1, 0.9):
        estimator.observe(Lane.BACKGROUND, 1, seconds)  # the mean (last, 0.9) is above the median
    assert router.margin(1) == pytest.approx(0.05)


def test_the_quantile_margin_reads_the_batch_size_bucket_and_the_prior():
    router, estimator = make_router(floor=0.05, prior=0.05, margin_quantile=0.95)
    assert router.margin(4) == pytest.approx(0.05)  # no observation: prior for both, no tail
    for seconds in (0.3, 0.3, 0.5):
        estimator.observe(Lane.BACKGROUND, 16, seconds)
    estimator.observe(Lane.BACKGROUND, 1, 0.02)
    assert router.margin(1) == pytest.approx(0.05)
    assert router.margin(16) == pytest.approx(0.05 + 0.5 - estimator.expected(Lane.BACKGROUND, 16))


@pytest.mark.parametrize("levers", [{"urgent_budget": -1}, {"urgent_budget": 1.5}, {"margin_quantile": 1.0},
                                    {"margin_quantile": 0.0}, {"latency_window": 0}, {"urgent_budget": True}])
def test_bad_lever_values_are_refused(levers):
    with pytest.raises(ValueError):
        SchedulerConfig(**levers)


def test_the_levers_round_trip_through_triton_parameters():
    config = SchedulerConfig(urgent_budget=4, margin_quantile=0.95, latency_window=32)
    params = config.to_parameters()
    assert (params["urgent_budget"], params["margin_quantile"], params["latency_window"]) == ("4", "0.95", "32")
    assert SchedulerConfig.from_dict(params) == config
    assert SchedulerConfig.from_dict(SchedulerConfig().to_parameters()) == SchedulerConfig()
    assert SchedulerConfig().to_parameters()["margin_quantile"] == "none"
    assert LatencyEstimator.from_config(config)._window == 32
