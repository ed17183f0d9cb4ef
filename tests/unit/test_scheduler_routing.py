"""ChunkRouter: first chunk urgent, slack below margin urgent, else background; modes."""
import pytest

from scheduler import (ROUTES, ChunkRouter, Lane, LatencyEstimator, PlaybackClock, RouteReason,
                       SchedulerConfig, ServingMode)


class FakeClock:
    def __init__(self, t: float = 50.0) -> None:
        self.t = t

    def advance(self, dt: float) -> float:
        self.t += dt
        return self.t


def make_router(mode=ServingMode.VOXLANE, floor=0.05, safety=1.0, prior=0.05, **levers):
    config = SchedulerConfig(mode=mode, margin_floor_s=floor, safety_factor=safety, latency_prior_s=prior, **levers)
    estimator = LatencyEstimator.from_config(config)
    return ChunkRouter(config, estimator), estimator


def playing_clock(t_first: float, durations) -> PlaybackClock:
    """Chunk 0 sent at t_first; later chunks only emitted."""
    clock = PlaybackClock()
    clock.on_sent(0, durations[0], t_first)
    for i, d in enumerate(durations[1:], start=1):
        clock.on_emitted(i, d)
    return clock


def test_first_chunk_is_urgent():
    router, _ = make_router()
    decision = router.route(PlaybackClock(), 0, now=0.0)
    assert decision.lane is Lane.URGENT
    assert decision.reason == "first_chunk"
    assert decision.slack_s is None


def test_plenty_of_slack_goes_background():
    fake = FakeClock()
    router, _ = make_router()  # margin = 0.05 + 1.0 * 0.05 = 0.10
    clock = playing_clock(fake.t, [0.8, 0.8])
    decision = router.route(clock, 1, fake.advance(0.1))  # deadline 50.8, slack 0.65
    assert decision.lane is Lane.BACKGROUND
    assert decision.reason is RouteReason.SLACK_OK
    assert decision.slack_s == pytest.approx(0.65)
    assert decision.margin_s == pytest.approx(0.10)
    assert not decision.is_slack_bound


def test_low_slack_is_urgent():
    fake = FakeClock()
    router, _ = make_router()
    clock = playing_clock(fake.t, [0.8, 0.8])
    decision = router.route(clock, 1, fake.advance(0.7))  # slack 0.8-0.7-0.05 = 0.05 < 0.10
    assert decision.lane is Lane.URGENT
    assert decision.reason == "low_slack"
    assert decision.slack_s == pytest.approx(0.05)


def test_late_lm_negative_slack_is_urgent():
    fake = FakeClock()
    router, _ = make_router()
    clock = playing_clock(fake.t, [0.8, 0.8])
    decision = router.route(clock, 1, fake.advance(1.0))  # ready after its deadline
    assert decision.lane is Lane.URGENT
    assert decision.slack_s < 0


def test_chunk_exactly_at_deadline_with_zero_latency():
    """slack < margin is urgent: slack 0 is urgent iff the margin is positive."""
    clock = playing_clock(0.0, [0.5, 0.5])
    no_margin, _ = make_router(floor=0.0, prior=0.0)
    at_deadline = no_margin.route(clock, 1, now=0.5)
    assert at_deadline.slack_s == 0.0
    assert at_deadline.lane is Lane.BACKGROUND  # arrives exactly on time: not late
    with_floor, _ = make_router(floor=0.01, prior=0.0)
    assert with_floor.route(clock, 1, now=0.5).lane is Lane.URGENT


def test_slack_equal_to_margin_is_background():
    router, _ = make_router(floor=0.25, safety=0.0, prior=0.25)  # margin 0.25
    clock = playing_clock(0.0, [1.0, 1.0])
    decision = router.route(clock, 1, now=0.5)  # slack 1.0 - 0.5 - 0.25 = 0.25
    assert decision.slack_s == decision.margin_s == 0.25
    assert decision.lane is Lane.BACKGROUND


def test_first_chunk_in_flight_uses_deadline_lower_bound():
    """t_first >= now, so now + offset(i) bounds the deadline from below."""
    router, _ = make_router()  # margin 0.10, expected 0.05
    clock = PlaybackClock()
    clock.on_emitted(0, 0.8)
    long_first = router.route(clock, 1, now=3.0)
    assert long_first.is_slack_bound
    assert long_first.slack_s == pytest.approx(0.75)
    assert long_first.lane is Lane.BACKGROUND
    short = PlaybackClock()
    short.on_emitted(0, 0.12)  # bound slack 0.07 < 0.10
    decision = router.route(short, 1, now=3.0)
    assert decision.lane is Lane.URGENT and decision.is_slack_bound
    assert decision.reason is RouteReason.LOW_SLACK


def test_margin_tracks_background_latency_at_batch_size():
    router, estimator = make_router(floor=0.05, safety=1.0, prior=0.05)
    estimator.observe(Lane.BACKGROUND, 1, 0.02)
    estimator.observe(Lane.BACKGROUND, 16, 0.30)
    assert router.margin(1) == pytest.approx(0.07)
    assert router.margin(16) == pytest.approx(0.35)
    clock = playing_clock(0.0, [0.8, 0.8])
    assert router.route(clock, 1, now=0.3, background_batch_size=1).lane is Lane.BACKGROUND
    assert router.route(clock, 1, now=0.3, background_batch_size=16).lane is Lane.URGENT


def test_urgent_lane_latency_does_not_move_margin():
    router, estimator = make_router()
    estimator.observe(Lane.URGENT, 1, 5.0)
    assert router.margin(1) == pytest.approx(0.10)


@pytest.mark.parametrize("mode, lane", [
    (ServingMode.TIMESHARE, Lane.INLINE),
    (ServingMode.COLOCATE, Lane.BACKGROUND),
    (ServingMode.PARTITION, Lane.BACKGROUND),
])
def test_single_lane_modes_route_everything_to_their_lane(mode, lane):
    router, _ = make_router(mode=mode)
    clock = playing_clock(0.0, [0.8, 0.8])
    first = router.route(PlaybackClock(), 0, now=0.0)
    late = router.route(clock, 1, now=5.0)
    assert first.lane is lane and late.lane is lane
    assert first.reason == late.reason == "mode"


def test_mode_lanes():
    assert ServingMode.VOXLANE.lanes == (Lane.URGENT, Lane.BACKGROUND)
    assert ServingMode.TIMESHARE.lanes == (Lane.INLINE,)
    assert [m.is_partitioned for m in ServingMode] == [False, False, True, True]
    assert [lane.value for lane in Lane] == ["urgent", "background", "inline"]


def test_the_reason_says_why_a_chunk_went_urgent_as_the_clock_runs_towards_its_deadline():
    """First chunk, then low slack once now passes deadline - expected - margin; never another pair."""
    fake = FakeClock(50.0)
    router, _ = make_router()  # expected 0.05, margin 0.10: urgent from 0.15 s before the deadline
    clock = playing_clock(fake.t, [0.8, 0.8])  # chunk 1's deadline: 50.8
    reasons = [router.route(PlaybackClock(), 0, now=fake.t).reason]
    for _ in range(8):
        decision = router.route(clock, 1, fake.advance(0.1))
        assert (decision.lane, decision.reason) in ROUTES
        reasons.append(decision.reason)
    assert reasons == [RouteReason.FIRST_CHUNK] + [RouteReason.SLACK_OK] * 6 + [RouteReason.LOW_SLACK] * 2


def test_the_reasons_are_the_metric_labels():
    assert [r.value for r in RouteReason] == ["first_chunk", "low_slack", "slack_ok", "urgent_full", "mode"]
    assert {lane for lane, reason in ROUTES if reason is not RouteReason.MODE} == {Lane.URGENT, Lane.BACKGROUND}
