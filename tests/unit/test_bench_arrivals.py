"""Open-loop arrivals: seeded, inside the window, at the asked mean rate; Gamma burstiness shows in the gaps."""
import numpy as np
import pytest

from clients.bench.arrivals import arrival_times


def test_same_seed_same_times_other_seed_other_times():
    assert arrival_times(5.0, 20.0, seed=3) == arrival_times(5.0, 20.0, seed=3)
    assert arrival_times(5.0, 20.0, seed=3) != arrival_times(5.0, 20.0, seed=4)


@pytest.mark.parametrize("arrival,burstiness", [("poisson", 1.0), ("gamma", 0.25), ("gamma", 4.0)])
def test_mean_rate_and_window(arrival, burstiness):
    times = arrival_times(10.0, 2000.0, seed=0, arrival=arrival, burstiness=burstiness)
    assert 0 <= times[0] and times[-1] < 2000.0
    assert np.all(np.diff(times) >= 0)
    assert len(times) / 2000.0 == pytest.approx(10.0, rel=0.03)


def test_burstiness_sets_the_spread_of_gaps():
    cv = {b: np.std(np.diff(arrival_times(10.0, 2000.0, 1, "gamma", b))) * 10.0 for b in (0.25, 1.0, 4.0)}
    # coefficient of variation of Gamma gaps is 1/sqrt(shape): 2, 1, 0.5
    assert cv[0.25] == pytest.approx(2.0, rel=0.1)
    assert cv[1.0] == pytest.approx(1.0, rel=0.1)
    assert cv[4.0] == pytest.approx(0.5, rel=0.1)


def test_poisson_ignores_burstiness_and_bad_values_are_refused():
    assert arrival_times(3.0, 50.0, 2, "poisson", 0.3) == arrival_times(3.0, 50.0, 2)
    with pytest.raises(ValueError):
        arrival_times(0.0, 10.0, 0)
    with pytest.raises(ValueError):
        arrival_times(1.0, 10.0, 0, "uniform")


def test_high_rate_short_window_is_covered():
    times = arrival_times(500.0, 1.0, seed=7)
    assert 400 < len(times) < 600 and times[-1] < 1.0
