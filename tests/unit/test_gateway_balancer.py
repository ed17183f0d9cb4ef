"""Least-live-streams routing with an injected clock."""
from __future__ import annotations

from server.gateway.balancer import Backend, Balancer
from server.gateway.service import parse_live


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def balancer(n: int = 2, clock=None) -> Balancer:
    return Balancer([Backend(f"s{i}:8001") for i in range(n)], down_s=2.0, clock=clock or Clock())


def test_new_streams_go_to_the_server_with_fewest_live_streams():
    b = balancer(3)
    first, second, third = b.acquire(), b.acquire(), b.acquire()
    assert [x.url for x in (first, second, third)] == ["s0:8001", "s1:8001", "s2:8001"]
    b.release(second)
    assert b.acquire() is second  # the only one with no live stream
    assert b.num_live == 3


def test_ties_alternate_for_sequential_streams():
    b = balancer(2)
    urls = []
    for _ in range(4):
        backend = b.acquire()
        urls.append(backend.url)
        b.release(backend)
    assert urls == ["s0:8001", "s1:8001", "s0:8001", "s1:8001"]


def test_scraped_live_requests_count_streams_that_bypass_the_gateway():
    b = balancer(2)
    b.on_scrape(b.backends[0], 5)  # other clients keep server 0 busy
    assert b.acquire() is b.backends[1]
    assert b.acquire() is b.backends[1]  # 2 live here vs 5 there


def test_the_gateways_own_streams_in_a_scrape_are_not_counted_twice_or_late():
    b = balancer(2)
    mine = b.acquire()
    b.on_scrape(mine, 1)  # the server sees our one stream
    assert mine.load == 1
    b.release(mine)  # it ended; the next scrape has not come yet
    assert mine.load == 0


def test_a_server_marked_down_is_skipped_until_its_time_is_up():
    clock = Clock()
    b = balancer(2, clock)
    b.mark_down(b.backends[0])
    assert b.acquire() is b.backends[1] and b.acquire() is b.backends[1]
    assert b.acquire(exclude=(b.backends[1],)) is None
    clock.now = 2.5
    assert b.acquire() is b.backends[0]


def test_parse_live_reads_the_gauge_not_its_neighbours():
    text = ("# TYPE voxlane_live_requests gauge\nvoxlane_live_requests 3\n"
            "voxlane_live_requests_other 9\nnv_inference_count 4\n")
    assert parse_live(text) == 3
    assert parse_live("nv_inference_count 4\n") is None
