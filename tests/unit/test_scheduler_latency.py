"""LatencyEstimator: EWMA per (lane, batch size), fallbacks, thread safety."""
import threading

import pytest

from scheduler import Lane, LatencyEstimator, SchedulerConfig


def test_prior_before_any_observation():
    est = LatencyEstimator(prior_s=0.07, alpha=0.5)
    assert est.expected(Lane.BACKGROUND, 4) == 0.07


def test_first_observation_then_ewma():
    est = LatencyEstimator(prior_s=0.07, alpha=0.5)
    est.observe(Lane.BACKGROUND, 2, 0.10)
    assert est.expected(Lane.BACKGROUND, 2) == pytest.approx(0.10)
    est.observe(Lane.BACKGROUND, 2, 0.20)
    assert est.expected(Lane.BACKGROUND, 2) == pytest.approx(0.15)


def test_lanes_are_separate():
    est = LatencyEstimator(prior_s=0.07, alpha=0.5)
    est.observe(Lane.URGENT, 1, 0.01)
    assert est.expected(Lane.BACKGROUND, 1) == 0.07
    assert est.expected(Lane.URGENT, 1) == pytest.approx(0.01)


def test_unseen_batch_size_uses_nearest_seen_larger_on_tie():
    est = LatencyEstimator(prior_s=0.07, alpha=0.5)
    est.observe(Lane.BACKGROUND, 2, 0.02)
    est.observe(Lane.BACKGROUND, 8, 0.08)
    assert est.expected(Lane.BACKGROUND, 1) == pytest.approx(0.02)
    assert est.expected(Lane.BACKGROUND, 4) == pytest.approx(0.02)
    assert est.expected(Lane.BACKGROUND, 5) == pytest.approx(0.08)  # tie 2 vs 8: larger
    assert est.expected(Lane.BACKGROUND, 6) == pytest.approx(0.08)
    assert est.expected(Lane.BACKGROUND, 64) == pytest.approx(0.08)


def test_from_config_and_validation():
    est = LatencyEstimator.from_config(SchedulerConfig(latency_prior_s=0.03))
    assert est.expected(Lane.BACKGROUND, 1) == 0.03
    with pytest.raises(ValueError):
        est.observe(Lane.BACKGROUND, 0, 0.1)
    with pytest.raises(ValueError):
        est.observe(Lane.BACKGROUND, 1, -0.1)
    with pytest.raises(ValueError):
        LatencyEstimator(prior_s=0.05, alpha=0.0)


def test_thread_safety_smoke():
    est = LatencyEstimator(prior_s=0.05, alpha=0.1)
    num_threads, per_thread = 8, 2000
    barrier = threading.Barrier(num_threads)
    errors = []

    def work(tid):
        barrier.wait()
        for i in range(per_thread):
            est.observe(Lane.BACKGROUND, 1 + i % 4, 0.01 * (1 + i % 4))
            value = est.expected(Lane.BACKGROUND, 1 + tid % 4)
            if not 0.0 < value <= 0.05:
                errors.append(value)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(num_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    stats = est.snapshot()
    assert sum(s.count for s in stats) == num_threads * per_thread
    for s in stats:  # each bucket only ever saw one value
        assert s.mean_s == pytest.approx(0.01 * s.batch_size)


def test_quantile_is_the_nearest_rank_of_the_latest_window():
    est = LatencyEstimator(prior_s=0.07, alpha=0.5, window=4)
    assert est.quantile(Lane.BACKGROUND, 1, 0.9) == 0.07  # the prior before any observation
    for seconds in (0.9, 0.1, 0.2, 0.3, 0.4):  # 0.9 falls out of the window of 4
        est.observe(Lane.BACKGROUND, 2, seconds)
    assert est.quantile(Lane.BACKGROUND, 2, 0.99) == pytest.approx(0.4)
    assert est.quantile(Lane.BACKGROUND, 2, 0.5) == pytest.approx(0.2)
    assert est.quantile(Lane.BACKGROUND, 2, 0.51) == pytest.approx(0.3)
    assert est.quantile(Lane.BACKGROUND, 3, 0.99) == pytest.approx(0.4)  # the nearest bucket, like expected
    assert est.quantile(Lane.URGENT, 2, 0.99) == 0.07
    with pytest.raises(ValueError):
        est.quantile(Lane.BACKGROUND, 2, 1.0)
    with pytest.raises(ValueError):
        LatencyEstimator(prior_s=0.05, alpha=0.5, window=0)
