"""Which servers take new streams: the `--triton` servers, and the addresses each `--triton-dns` name answers.

Pure Python with an injected clock; the gateway feeds it each name's answer (resolver.py) every `--dns-interval-s`.
Kubernetes does the scaling; the DNS name of a headless Service says which pods there are. A server a name answers
for the first time joins not ready (it takes a stream once its readiness says so, readiness.py). A server no source
answers any more leaves: it takes no new stream, and its live streams finish on it (leaving DNS is no reason to cut
them). It keeps its place (its streams, its channels, its state) until it has been gone `forget_after_s` and holds no
stream; a record that comes back before then (a flapping record) is the same server again, nothing reset.
A lookup that failed is not fed here: the servers a name answered last stay until it answers again.
The names together hold at most `max_servers` servers (`--max-servers`), those that left and are not yet forgotten
among them (each has its channels, polls and scrapes). Past it, the members stay first (a cap never takes out a
server that serves), then the servers that left and came back, then new ones in sorted order; a server that left
gives its place up to them if it holds no stream (it is forgotten at once), and keeps it while it holds one. The
other addresses are not added while the cap is full.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

from server.gateway.balancer import Backend, Balancer


@dataclass(frozen=True)
class MembershipChange:
    joined: tuple[Backend, ...] = ()  # servers new to the gateway (not ready until a readiness poll says so)
    left: tuple[Backend, ...] = ()  # answered by no source any more: no new stream, their live streams finish
    returned: tuple[Backend, ...] = ()  # answered again before they were forgotten: the same servers
    # the addresses (gRPC HOST:PORT) answered past `max_servers` and not added, where they changed (none: every
    # answered address fits again); None: the same as at the last update
    over_cap: tuple[str, ...] | None = None

    @property
    def is_empty(self) -> bool:
        return not (self.joined or self.left or self.returned) and self.over_cap is None


class Membership:
    def __init__(self, balancer: Balancer, metrics_url: Callable[[str], str | None], forget_after_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic, max_servers: int | None = None) -> None:
        self.balancer = balancer
        self.forget_after_s = forget_after_s
        self.max_servers = max_servers  # the most servers the names add together; None: no cap
        self._metrics_url = metrics_url  # a joining server's metrics URL, from its gRPC HOST:PORT
        self._clock = clock
        self._static = frozenset(b.url for b in balancer.backends)  # the `--triton` servers: members for good
        self._answers: dict[str, frozenset[str]] = {}  # per DNS name: the gRPC HOST:PORT of each address it answered
        self._left_at: dict[Backend, float] = {}
        self._over_cap: tuple[str, ...] = ()  # the answered addresses not added (the cap was full), sorted

    def answered(self, name: str) -> frozenset[str]:
        """The gRPC HOST:PORT of each address `name` answered last (none before its first answer)."""
        return self._answers.get(name, frozenset())

    def update(self, name: str, urls: frozenset[str]) -> MembershipChange:
        """`name` now answers `urls` (gRPC HOST:PORT each; none: the name has no server behind it)."""
        self._answers[name] = urls
        present = {b.url: b for b in self.balancer.backends}
        answered = frozenset().union(*self._answers.values()) - self._static
        within, evicted = self._within_cap(answered, present)
        wanted = self._static | within
        joined = tuple(Backend(url, self._metrics_url(url), is_ready=False) for url in sorted(wanted - present.keys()))
        for backend in joined:
            self.balancer.add(backend)
        returned = tuple(b for url, b in present.items() if url in wanted and not b.is_member)
        left = tuple(b for url, b in present.items() if url not in wanted and b.is_member)
        for backend in returned:
            backend.is_member = True
            del self._left_at[backend]
        for backend in left:
            backend.is_member = False
            self._left_at[backend] = self._clock()
        for backend in evicted:  # idle, and its place is wanted: `forget` removes it now
            self._left_at[backend] = -math.inf
        over_cap = tuple(sorted(answered - wanted))
        changed = over_cap if over_cap != self._over_cap else None
        self._over_cap = over_cap
        return MembershipChange(joined, left, returned, changed)

    def _within_cap(self, answered: frozenset[str],
                    present: dict[str, Backend]) -> tuple[frozenset[str], tuple[Backend, ...]]:
        """-> (the `answered` addresses that may be members, the servers held but not answered to forget at once).
        A held server no name answers keeps its place while it holds a stream; the places left go to the members
        first, then to the servers known from before (they left and are answered again), then to new ones, each in
        sorted order; the idle unanswered servers keep the places still free, the longest gone losing theirs
        first."""
        if self.max_servers is None:
            return answered, ()
        unanswered = [b for url, b in present.items() if url not in self._static and url not in answered]
        room = max(0, self.max_servers - sum(1 for b in unanswered if b.num_live > 0))

        def rank(url: str) -> tuple[int, str]:
            known = present.get(url)
            return (2 if known is None else 0 if known.is_member else 1), url

        within = answered if len(answered) <= room else frozenset(sorted(answered, key=rank)[:room])
        idle = sorted((b for b in unanswered if b.num_live == 0),
                      key=lambda b: (self._left_at.get(b, math.inf), b.url))  # the longest gone first
        return within, tuple(idle[:max(0, len(idle) - (room - len(within)))])

    def forget(self) -> tuple[Backend, ...]:
        """Remove from the balancer the servers gone `forget_after_s` ago or more that hold no stream (their channels
        are the caller's to close)."""
        now = self._clock()
        gone = tuple(b for b, left_at in self._left_at.items()
                     if b.num_live == 0 and now - left_at >= self.forget_after_s)
        for backend in gone:
            del self._left_at[backend]
            self.balancer.remove(backend)
        return gone
