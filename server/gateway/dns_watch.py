"""Each `--triton-dns` name asked again every `--dns-interval-s`, its answer fed to the membership (membership.py).

An answer, even an empty one, is the name's servers now. A failed lookup (resolver.py: a timeout, SERVFAIL,
REFUSED) changes nothing: the servers it answered last stay, each still taking streams while its readiness says so;
the failure is logged once, and its end once. So does a lookup where one record type failed and the other answered
(`DnsAnswer.failed_types`): the answered type's servers are the name's now, the failed type's stay as they were.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from server.gateway.balancer import Backend
from server.gateway.membership import Membership, MembershipChange
from server.gateway.resolver import DnsResolver, HostPort, LookupFailure, address_url, record_type

log = logging.getLogger("voxlane.gateway")


class DnsWatch:
    def __init__(self, resolver: DnsResolver, membership: Membership, interval_s: float,
                 on_change: Callable[[MembershipChange], None],
                 on_forget: Callable[[Backend], Awaitable[None]]) -> None:
        self.resolver, self.membership, self.interval_s = resolver, membership, interval_s
        self._on_change, self._on_forget = on_change, on_forget
        self._failures: dict[HostPort, LookupFailure | None] = {}  # how each name's last lookup failed
        self._failed_types: dict[HostPort, tuple[str, ...]] = {}  # the record types of a name's last partial answer

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
        key = f"{name.host}:{name.port}"
        urls = frozenset(address_url(a, name.port) for a in answer.addresses)
        if answer.failed_types:  # what the failed type answered last stands: its servers did not leave DNS
            urls |= frozenset(url for url in self.membership.answered(key) if record_type(url) in answer.failed_types)
            if self._failed_types.get(name) != answer.failed_types:
                log.warning("DNS name %s: its %s lookup failed (%s); its servers of that type stay as they were",
                            name.host, "/".join(answer.failed_types), answer.detail)
            self._failed_types[name] = answer.failed_types
        elif self._failed_types.pop(name, None):
            log.warning("DNS name %s: every record type answers again", name.host)
        change = self.membership.update(key, urls)
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
