"""ChunkRouter for a cascade's chunk that needs a refinement call: its slack and margin count the background
refinement lane's estimate before the background codec's, each at the batch the chunk would join there."""
import pytest

from scheduler import ChunkRouter, Lane, LatencyEstimator, RouteReason, SchedulerConfig

from tests.unit.test_scheduler_routing import FakeClock, playing_clock


def make_cascade_router(**levers):
    """A router whose codec and refinement estimates start at the prior (0.05 s) and follow the last observation."""
    config = SchedulerConfig(margin_floor_s=0.05, safety_factor=1.0, latency_prior_s=0.05, latency_alpha=1.0,
                             **levers)
    codecs, refiners = LatencyEstimator.from_config(config), LatencyEstimator.from_config(config)
    return ChunkRouter(config, codecs, refiners), codecs, refiners


def chunk_1_at(router: ChunkRouter, elapsed_s: float, **load):
    """Chunk 1 of a stream whose 0.8 s chunk 0 was sent `elapsed_s` ago (its deadline: 0.8 s after that send)."""
    fake = FakeClock()
    clock = playing_clock(fake.t, [0.8, 0.8])
    return router.route(clock, 1, fake.advance(elapsed_s), **load)


def test_a_chunk_that_goes_background_without_its_refinement_goes_urgent_with_it():
    """Refinement 0.3 s, decode 0.05 s, 0.5 s before the deadline: the decode alone leaves slack 0.45 over a
    margin of 0.10; with the refinement the slack is 0.15, below a margin of 0.40."""
    router, _, refiners = make_cascade_router()
    refiners.observe(Lane.BACKGROUND, 1, 0.3)
    decode_only = chunk_1_at(router, 0.3)
    assert (decode_only.lane, decode_only.reason) == (Lane.BACKGROUND, RouteReason.SLACK_OK)
    assert decode_only.slack_s == pytest.approx(0.45) and decode_only.margin_s == pytest.approx(0.10)
    refined = chunk_1_at(router, 0.3, refine_batch_size=1)
    assert (refined.lane, refined.reason) == (Lane.URGENT, RouteReason.LOW_SLACK)
    assert refined.slack_s == pytest.approx(0.15) and refined.margin_s == pytest.approx(0.40)
    assert router.margin(1, refine_batch_size=1) == pytest.approx(0.40) and router.margin(1) == pytest.approx(0.10)


def test_before_any_refinement_the_prior_is_counted():
    router, _, _ = make_cascade_router()
    assert chunk_1_at(router, 0.3, refine_batch_size=1).slack_s == pytest.approx(0.8 - 0.3 - 0.05 - 0.05)


def test_the_refinement_estimate_is_read_at_the_batch_the_chunk_would_join():
    router, codecs, refiners = make_cascade_router()
    refiners.observe(Lane.BACKGROUND, 1, 0.01)
    refiners.observe(Lane.BACKGROUND, 8, 0.30)
    codecs.observe(Lane.BACKGROUND, 4, 0.02)
    alone = chunk_1_at(router, 0.3, background_batch_size=4, refine_batch_size=1)
    crowded = chunk_1_at(router, 0.3, background_batch_size=4, refine_batch_size=8)
    assert alone.lane is Lane.BACKGROUND and alone.slack_s == pytest.approx(0.8 - 0.3 - 0.02 - 0.01)
    assert crowded.lane is Lane.URGENT and crowded.slack_s == pytest.approx(0.8 - 0.3 - 0.02 - 0.30)


def test_the_urgent_refinement_lanes_time_does_not_move_the_margin():
    """As the urgent codec's: the rule asks whether the background lanes can make the deadline."""
    router, _, refiners = make_cascade_router()
    refiners.observe(Lane.URGENT, 1, 5.0)
    assert router.margin(1, refine_batch_size=1) == pytest.approx(0.05 + 0.05 + 0.05)
    assert chunk_1_at(router, 0.3, refine_batch_size=1).lane is Lane.BACKGROUND


def test_the_quantile_margin_adds_the_refinement_lanes_tail_to_the_codecs():
    router, codecs, refiners = make_cascade_router(margin_quantile=0.9)
    for seconds in (0.6, 0.1):
        codecs.observe(Lane.BACKGROUND, 1, seconds)  # mean (the last) 0.1, 0.9-quantile 0.6: tail 0.5
    for seconds in (0.4, 0.2):
        refiners.observe(Lane.BACKGROUND, 1, seconds)  # tail 0.2
    assert router.margin(1) == pytest.approx(0.05 + 0.5)
    assert router.margin(1, refine_batch_size=1) == pytest.approx(0.05 + 0.5 + 0.2)


def test_a_low_slack_refined_chunk_that_finds_the_budget_used_up_goes_background():
    router, _, refiners = make_cascade_router(urgent_budget=2)
    refiners.observe(Lane.BACKGROUND, 1, 0.3)
    below = chunk_1_at(router, 0.3, refine_batch_size=1, urgent_in_flight=1)
    full = chunk_1_at(router, 0.3, refine_batch_size=1, urgent_in_flight=2)
    assert (below.lane, below.reason) == (Lane.URGENT, RouteReason.LOW_SLACK)
    assert (full.lane, full.reason) == (Lane.BACKGROUND, RouteReason.URGENT_FULL)


def test_a_router_without_a_refinement_estimate_refuses_a_chunk_that_asks_for_one():
    config = SchedulerConfig()
    router = ChunkRouter(config, LatencyEstimator.from_config(config))
    with pytest.raises(ValueError, match="refinement"):
        chunk_1_at(router, 0.3, refine_batch_size=1)
    assert chunk_1_at(router, 0.3).lane is Lane.BACKGROUND
