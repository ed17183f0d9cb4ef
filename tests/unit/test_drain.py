"""`voxlane drain`, a leaving pod's preStop hook: it waits for the pod to leave the gateways' view, then for its
streams to end, never past its timeout; and it reads a gauge summed over its labels."""
from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from server.drain import DrainConfig, drain, read_gauge
from protocol.metrics import parse_live, parse_sum


class Clock:
    def __init__(self) -> None:
        self.now, self.sleeps = 0.0, []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def run(config: DrainConfig, readings: list[float | None]):
    clock, values = Clock(), iter(readings)
    live = drain(config, lambda: next(values), clock=lambda: clock.now, sleep=clock.sleep)
    return live, clock


def test_it_waits_to_leave_then_until_no_stream_is_live():
    live, clock = run(DrainConfig(leave_s=15, timeout_s=300, poll_s=2), [3, 1, 0, 7])
    assert live == 0 and clock.sleeps == [15, 2, 2]


def test_it_gives_up_at_its_timeout_with_what_is_left():
    live, clock = run(DrainConfig(leave_s=10, timeout_s=5, poll_s=2), [4] * 10)
    assert live == 4 and clock.sleeps == [10, 2, 2, 1]  # the last sleep ends at the deadline, not past it
    assert clock.now == 15


def test_metrics_that_do_not_answer_end_the_wait_at_once():
    live, clock = run(DrainConfig(leave_s=1, timeout_s=300), [None])
    assert live is None and clock.sleeps == [1]


def test_a_gauge_is_summed_over_its_labels_and_its_neighbours_are_not():
    text = ("# TYPE voxlane_gateway_live_streams gauge\n"
            'voxlane_gateway_live_streams{server="a:8001"} 2\nvoxlane_gateway_live_streams{server="b:8001"} 3\n'
            "voxlane_gateway_live_streams_total 40\nvoxlane_live_requests 7\n")
    assert parse_sum(text, "voxlane_gateway_live_streams") == 5
    assert parse_live(text) == 7 and parse_sum(text, "voxlane_admission_limit") is None


def test_the_gauge_is_read_from_the_pods_metrics_port():
    class Metrics(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            body = b"voxlane_live_requests 2\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Metrics)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        assert read_gauge(f"http://127.0.0.1:{server.server_port}/metrics", "voxlane_live_requests") == 2
    finally:
        server.shutdown()
        server.server_close()
    assert read_gauge(f"http://127.0.0.1:{server.server_port}/metrics", "voxlane_live_requests") is None


def test_a_negative_wait_is_refused():
    with pytest.raises(ValueError):
        DrainConfig(leave_s=-1)
