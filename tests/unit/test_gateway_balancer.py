"""Least-live-streams routing with an injected clock."""
from __future__ import annotations

import asyncio
import contextlib

import pytest

from protocol.metrics import LIVE_METRIC
from server.gateway import service
from server.gateway.balancer import Backend, Balancer
from server.gateway.config import GatewayConfig
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


class Scrapes:
    """aiohttp's client session, faked: the server whose URL says "dead" never answers; the others answer a live
    count one higher each time they are read."""

    def __init__(self, timeout=None) -> None:
        self.num_reads = 0

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc) -> bool:
        return False

    @contextlib.asynccontextmanager
    async def get(self, url: str):
        if "dead" in url:
            await asyncio.Event().wait()
        self.num_reads += 1
        yield Reply(f"{LIVE_METRIC} {self.num_reads}\n")


class Reply:
    def __init__(self, body: str) -> None:
        self.body = body

    async def text(self) -> str:
        return self.body


def test_a_dead_server_s_metrics_hold_back_no_other_s(monkeypatch):
    """The servers' /metrics are read at once, each within its timeout (1 s at the least): one that never answers
    delays neither the others' figures nor, past its timeout, their next reading."""
    config = GatewayConfig(tritons=("dead:1", "live:1"), metrics_urls=("http://dead/metrics", "http://live/metrics"),
                           scrape_interval_s=0.05)
    gateway = service.Gateway(config)
    live = gateway.balancer.backends[1]
    monkeypatch.setattr(service.aiohttp, "ClientSession", Scrapes)

    async def scraped() -> tuple[int, int]:
        task = asyncio.create_task(gateway._scrape_forever())
        await asyncio.sleep(0.3)
        first = live.reported_live
        await asyncio.sleep(1.2)  # past the dead server's timeout: a second round read the live one again
        task.cancel()
        return first, live.reported_live

    first, later = asyncio.run(scraped())
    assert first == 1 and later > first


@pytest.mark.parametrize("body", [f"{LIVE_METRIC} NaN\n", f"{LIVE_METRIC} +Inf\n", f"{LIVE_METRIC} -1\n"])
def test_a_live_count_that_is_no_count_reads_as_none(body):
    assert parse_live(body) is None


class BrokenScrapes(Scrapes):
    """The server whose URL says "broken" answers a body that is not UTF-8, or raises what aiohttp does not name."""

    @contextlib.asynccontextmanager
    async def get(self, url: str):
        if "broken" in url:
            raise RuntimeError("a fault no handler names")
        if "binary" in url:
            yield BinaryReply()
            return
        self.num_reads += 1
        yield Reply(f"{LIVE_METRIC} {self.num_reads}\n")


class BinaryReply:
    async def text(self) -> str:
        return b"\xff\xfe".decode()


def test_a_server_s_broken_metrics_end_neither_the_scrapes_nor_the_other_servers_figures(monkeypatch):
    config = GatewayConfig(tritons=("broken:1", "binary:1", "live:1"), scrape_interval_s=0.05,
                           metrics_urls=("http://broken/metrics", "http://binary/metrics", "http://live/metrics"))
    gateway = service.Gateway(config)
    live = gateway.balancer.backends[2]
    monkeypatch.setattr(service.aiohttp, "ClientSession", BrokenScrapes)

    async def scraped() -> tuple[int, int, bool]:
        task = asyncio.create_task(gateway._scrape_forever())
        await asyncio.sleep(0.2)
        first = live.reported_live
        await asyncio.sleep(0.3)
        running = not task.done()
        task.cancel()
        return first, live.reported_live, running

    first, later, running = asyncio.run(scraped())
    assert running and first >= 1 and later > first
