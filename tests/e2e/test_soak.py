"""A bounded soak: mixed valid, invalid and cancelled requests for a minute (tools/soak.py runs longer);
and the same with a registered voice and inline cloning, on a model that clones.

After a warm-up, every process of the server (tritonserver and each Python-backend stub) keeps its
memory within `rss_tolerance_kb` of its peak during the warm-up, the router stub ends with the threads
it had (no stream thread or iterator left behind), and every stream's chunks came 0, 1, 2, … with
nothing lost or repeated.
"""
from __future__ import annotations

import pytest

from tests.e2e.conftest import start_server
from tests.e2e.test_cancel import wait_for
from tests.e2e.test_metrics import scrape
from tools.soak import CLONING_KINDS, CLONING_PRESET, PLAIN_KINDS, format_figures, register_soak_voice, soak

SOAK_MINUTES = 1.0
WARM_UP_S = 15.0
CLONING_WARM_UP_S = 30.0
NUM_WORKERS = 4
RATE = 4.0  # requests a second in the soak's minute, after a closed-loop warm-up. Closed loop, the tiny model
# served ~20 a second and loaded both cores of a small machine all minute (tools/soak.py's default, for a long soak)


MAX_GROWTH_KB = 16 * 1024  # any process, after the warm-up (the 30-minute soak's bound; docs/RELIABILITY.md)
TRITON_KB_PER_MINUTE = 1024  # tritonserver itself: flat, less than 1 MB a minute after the warm-up


def rss_tolerance_kb(name: str, num_valid: int) -> int:
    """Allowed private growth after warm-up: 16 MB for any process. tritonserver is held flat, under 1 MB a minute,
    so that a per-request leak shows within a minute (it grew 0.05 kB per request in a 30-minute soak; when clients
    cancelled their streams after the final response it kept ~10 kB of each, 3-5 MB in this test's minute; with
    the longest references it kept the largest requests for reuse, up to 8 of them)."""
    if name == "tritonserver":
        return round(TRITON_KB_PER_MINUTE * SOAK_MINUTES)
    return MAX_GROWTH_KB


@pytest.fixture(scope="module")
def cloning_server(model_cache, tmp_path_factory):
    server = start_server(CLONING_PRESET, tmp_path_factory)
    yield server
    server.stop(grace_s=0)


@pytest.mark.soak
def test_soak_keeps_memory_threads_and_chunk_order(server, url):
    check_soak(server, url, PLAIN_KINDS, minimum={"valid": 100, "invalid": 20, "cancelled": 20})


@pytest.mark.soak
def test_soak_with_cloning_keeps_memory_threads_and_chunk_order(cloning_server):
    """A quarter of the requests clone a reference, of 1-4 s at 16-44.1 kHz or of 10-59 s at 48 kHz (up to 11.5 MB
    a request): the voice encoder meets a new shape each time (it grew 15 MB a minute with oneDNN's primitive cache
    and an untrimmed heap) and tritonserver carries the references. tritonserver is held to the same 1 MB a minute
    after a longer warm-up: its heap settles under the references' sizes in about 30 s (after 15 s it could
    still grow 1.8 MB in the minute; after 30 s it shrank 0.6 MB over 183 requests)."""
    url = cloning_server.grpc_url
    register_soak_voice(url)
    check_soak(cloning_server, url, CLONING_KINDS,
               minimum={"valid": 40, "invalid": 20, "cancelled": 20, "cloned": 20}, warm_up_s=CLONING_WARM_UP_S)


def check_soak(server, url: str, kinds, minimum: dict[str, int], warm_up_s: float = WARM_UP_S) -> None:
    """Every process within 16 MB of its warm-up peak; tritonserver within 1 MB a minute."""
    before, after, tally = soak(url, server.process.process.pid, SOAK_MINUTES, warm_up_s, NUM_WORKERS, seed=7,
                                kinds=kinds, rate=RATE)
    figures = format_figures(before, after, SOAK_MINUTES, sum(tally.counts.values()))
    print(figures)  # shown with -s, and in the failure report
    assert not tally.problems, tally.problems[:10]
    assert all(tally.counts[kind] >= n for kind, n in minimum.items()), tally.counts
    assert set(after) == set(before), figures  # no stub died
    for name, first in before.items():
        last = after[name]
        assert last.pid == first.pid, figures
        allowed = rss_tolerance_kb(name, tally.counts["valid"] + tally.counts["cloned"])
        assert last.private_kb - first.private_kb <= allowed, f"{name} grew more than {allowed} kB\n{figures}"
    assert after["vox_ensemble"].num_threads == before["vox_ensemble"].num_threads, figures
    assert wait_for(lambda: scrape(server)["voxlane_live_requests"] == 0, timeout_s=5)
    assert wait_for(lambda: scrape(server)["voxlane_lm_batch_size"] == 0, timeout_s=5)
