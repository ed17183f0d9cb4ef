"""Which Triton server takes a new stream: the one of the request's model with the fewest live streams.

Pure Python with an injected clock. The gateway counts the streams it has open on each server, at
once. When a server's metrics are scraped, its `voxlane_live_requests` (streams from every client)
less the gateway's own count at that moment estimates the streams of other clients, so traffic
that bypasses the gateway is seen within a scrape interval, while the gateway's own streams, which
the scrape sees late, are never counted twice or after they ended.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable


@dataclass(eq=False)  # identity: two entries are two servers
class Backend:
    """One Triton server as the balancer sees it."""

    url: str  # gRPC HOST:PORT
    metrics_url: str | None = None  # its Prometheus endpoint, for the cross-check
    num_live: int = 0  # streams this gateway has open on it
    reported_live: int = 0  # voxlane_live_requests at the last scrape
    external_live: int = 0  # of those, the streams of other clients (estimated at the scrape)
    num_started: int = 0  # streams sent to it so far (the tie-break)
    down_until: float = 0.0  # not chosen before this time (it refused a connection)
    is_ready: bool = True  # its last readiness poll (readiness.py): a server not ready gets no new stream
    # in the gateway's membership (a `--triton` server, or one its DNS names answer: membership.py); one that left
    # gets no new stream, and its live streams finish on it
    is_member: bool = True
    model: str | None = None  # the model it serves (its `vox_ensemble` config says); None: not learned yet
    clones_voices: bool = True  # False once its voice registry refused a register: its model clones no voice

    @property
    def load(self) -> int:
        return self.num_live + self.external_live


class Balancer:
    def __init__(self, backends: list[Backend], down_s: float = 2.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.backends = list(backends)  # a DNS name may answer none yet
        self.down_s = down_s
        self._clock = clock

    def acquire(self, model: str | None = None, exclude: tuple[Backend, ...] = ()) -> Backend | None:
        """The least loaded server of `model` (None: any) that is a member, up, ready and not in `exclude` (ties: the
        one used least); None if none."""
        now = self._clock()
        candidates = [b for b in self.backends if b not in exclude and b.down_until <= now and b.is_ready
                      and b.is_member and (model is None or b.model == model)]
        if not candidates:
            return None
        backend = min(candidates, key=lambda b: (b.load, b.num_started))
        backend.num_live += 1
        backend.num_started += 1
        return backend

    def add(self, backend: Backend) -> None:
        self.backends.append(backend)

    def remove(self, backend: Backend) -> None:
        """Forget a server (membership.py does so once it left and holds no stream)."""
        self.backends.remove(backend)

    def release(self, backend: Backend) -> None:
        backend.num_live -= 1

    def mark_down(self, backend: Backend) -> None:
        backend.down_until = self._clock() + self.down_s

    def on_scrape(self, backend: Backend, live_requests: int) -> None:
        backend.reported_live = live_requests
        backend.external_live = max(0, live_requests - backend.num_live)

    @property
    def num_live(self) -> int:
        return sum(b.num_live for b in self.backends)
