"""When requests are sent: open-loop arrival times, seeded so runs repeat."""
from __future__ import annotations

import numpy as np

ARRIVALS = ("poisson", "gamma")


def arrival_times(rate: float, duration_s: float, seed: int, arrival: str = "poisson",
                  burstiness: float = 1.0) -> list[float]:
    """Send offsets in [0, duration_s) for a mean of `rate` requests/s.

    Gaps are exponential (Poisson) or Gamma with shape `burstiness` and the same mean: below 1 burstier,
    above 1 more regular; Gamma with burstiness 1 is Poisson.
    """
    if rate <= 0 or duration_s <= 0:
        raise ValueError(f"rate and duration must be > 0, got {rate} and {duration_s}")
    if arrival not in ARRIVALS:
        raise ValueError(f"arrival must be one of {', '.join(ARRIVALS)}, got {arrival!r}")
    if burstiness <= 0:
        raise ValueError(f"burstiness must be > 0, got {burstiness}")
    shape = 1.0 if arrival == "poisson" else burstiness
    rng = np.random.default_rng(seed)
    draw = int(rate * duration_s + 10 * np.sqrt(rate * duration_s) + 10)  # almost always covers the window
    times = np.cumsum(rng.gamma(shape, 1.0 / (rate * shape), size=draw))
    while times[-1] < duration_s:
        times = np.concatenate([times, times[-1] + np.cumsum(rng.gamma(shape, 1.0 / (rate * shape), size=draw))])
    return [float(t) for t in times[times < duration_s]]
