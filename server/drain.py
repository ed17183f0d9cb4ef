"""`voxlane drain`: a leaving pod's preStop hook (the chart's server groups and scaled gateways).

Kubernetes takes a deleted pod out of its Services at once, so new streams go elsewhere once the gateways' DNS view
(or a client's connection pool) forgets it; the streams the pod holds go on over their connections. The hook waits
that out (`leave_s`), then until the pod's gauge of live streams reads 0, at most `timeout_s` (the longest stream a
server admits: `voxlane serve --max-audio-seconds`). The SIGTERM that follows stops the pod as usual: `voxlane serve`
ends whatever is left with a "retry elsewhere" reason (docs/RELIABILITY.md, "Stops").
"""
from __future__ import annotations

import argparse
import http.client
import time
import urllib.request
from dataclasses import dataclass
from typing import Callable

from protocol.metrics import LIVE_METRIC, parse_sum


@dataclass(frozen=True)
class DrainConfig:
    metrics_url: str = "http://127.0.0.1:8002/metrics"  # the pod's own (a server's metrics port; a gateway's port)
    metric: str = LIVE_METRIC  # a gauge of the streams it holds (a gateway: voxlane_gateway_live_streams)
    leave_s: float = 15.0  # DNS answers (5 s in CoreDNS) and the gateways' resolving period forget the pod
    timeout_s: float = 1800.0  # the longest a stream may last
    poll_s: float = 2.0

    def __post_init__(self) -> None:
        if min(self.leave_s, self.timeout_s) < 0 or self.poll_s <= 0:
            raise ValueError("--leave-s and --timeout-s must be >= 0, the poll period > 0")


def drain(config: DrainConfig, read: Callable[[], float | None], clock: Callable[[], float] = time.monotonic,
          sleep: Callable[[float], None] = time.sleep) -> float | None:
    """Wait for the pod to leave, then for its streams to end. -> the streams still live at the end (0: drained;
    None: the metrics did not answer, as from a server already gone)."""
    sleep(config.leave_s)
    deadline = clock() + config.timeout_s
    while True:
        live = read()
        if live is None or live <= 0 or clock() >= deadline:
            return live
        sleep(min(config.poll_s, max(0.0, deadline - clock())))


def read_gauge(url: str, metric: str) -> float | None:
    """`metric` summed over its labels from the /metrics at `url`; None where it does not answer or lacks it."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return parse_sum(response.read().decode(), metric)
    except (OSError, http.client.HTTPException, ValueError):  # no answer, a broken one, or a line not a number
        return None


def add_drain_command(commands) -> dict:
    defaults = DrainConfig()
    parser = commands.add_parser("drain", help="wait until this pod's streams have ended (a preStop hook)")
    parser.add_argument("--metrics-url", default=defaults.metrics_url, help="the pod's own /metrics")
    parser.add_argument("--metric", default=defaults.metric, help="the gauge of streams it holds")
    parser.add_argument("--leave-s", type=float, default=defaults.leave_s,
                        help="seconds to wait first, while the gateways stop sending it new streams")
    parser.add_argument("--timeout-s", type=float, default=defaults.timeout_s,
                        help="then at most this long for its streams to end")
    return {"drain": _drain}


def _drain(args: argparse.Namespace) -> int:
    config = DrainConfig(args.metrics_url, args.metric, args.leave_s, args.timeout_s)
    started = time.monotonic()
    live = drain(config, lambda: read_gauge(config.metrics_url, config.metric))
    left = "unknown (no metrics)" if live is None else f"{live:g}"
    print(f"voxlane: drain: {time.monotonic() - started:.0f} s, streams left: {left}", flush=True)
    return 0
