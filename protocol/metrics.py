"""The server's Prometheus gauges that its clients read (the gateway's balancer, `voxlane serve`'s stop, the chart's
autoscaler and `voxlane drain`)."""
from __future__ import annotations

import math

LIVE_METRIC = "voxlane_live_requests"  # streams in flight in the router
# streams the server admits at once (the LM lane's slots): live over limit is its room, what the chart scales on
ADMISSION_LIMIT_METRIC = "voxlane_admission_limit"


def parse_sum(text: str, name: str) -> float | None:
    """The gauge `name` from a /metrics text, summed over its labels; None where the text has none."""
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith((name + " ", name + "{"))]
    return sum(values) if values else None


def parse_live(text: str) -> int | None:
    """`LIVE_METRIC` from a /metrics text (summed over its labels); None where the text has none, or no count (NaN,
    an infinity, a negative number)."""
    live = parse_sum(text, LIVE_METRIC)
    return None if live is None or not 0 <= live < math.inf else int(live)
