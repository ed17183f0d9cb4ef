"""Each `--triton-dns` name asked again every `--dns-interval-s`, its answer fed to the membership (membership.py).

An answer, even an empty one, is the name's servers now. A failed lookup (resolver.py: a timeout, SERVFAIL,
REFUSED) changes nothing: the servers it answered last stay, each still taking streams while its readiness says so;
the failure is logged once, and its end once.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from server.gateway.balancer import Backend
from server.gateway.membership import Membership, MembershipChange
from server.gateway.resolver import DnsResolver, HostPort, LookupFailure, address_url

log = logging.getLogger("voxlane.gateway")


class DnsWatch:
    def __init__(self, resolver: DnsResolver, membership: Membership, interval_s: float,
                 on_change: Callable[[MembershipChange], None],
                 on_forget: Callable[[Backend], Awaitable[None]]) -> None:
        self.resolver, self.membership, self.interval_s = resolver, membership, interval_s
        self._on_change, self._on_forget = on_change, on_forget
        self._failures: dict[HostPort, LookupFailure | None] = {}  # how each name's last lookup failed

    async def resolve(self, name: HostPort) -> None:
        """Ask for `name` once: its answer updates the membership; servers gone long enough are forgotten."""
        answer = await self.resolver.lookup(name.host)
        if answer.failure is not None:
            if self._failures.get(name) is not answer.failure:
                log.warning("DNS name %s: lookup failed (%s: %s); its servers stay as they were", name.host,
                            answer.failure.value, answer.detail)
            self._failures[name] = answer.failure
            return
        if self._failures.pop(name, None) is not None:
            log.warning("DNS name %s answers again", name.host)
        change = self.membership.update(f"{name.host}:{name.port}",
                                        frozenset(address_url(a, name.port) for a in answer.addresses))
        if not answer.addresses and change.left:
            log.warning("DNS name %s has no address: none of its servers takes a new stream", name.host)
        self._on_change(change)
        for backend in self.membership.forget():
            await self._on_forget(backend)

    async def watch_forever(self, name: HostPort) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.resolve(name)
            except Exception:  # one failed round must not end the watch
                log.exception("watching the DNS name %s failed", name.host)
