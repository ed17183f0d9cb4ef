"""A DNS name's addresses: the boundary where a lookup's exceptions become values. Without a nameserver of its own
the gateway asks the system's resolver (getaddrinfo: /etc/hosts, then DNS with the search domains, as any program
on the host or in the pod resolves); with `--dns-server` it asks that server with dnspython.

A name answers with addresses (A and AAAA records: a headless Service's pods), or with none: the server said the
name does not exist (NXDOMAIN) or has no address records (NOERROR with no answer). Both are answers, and an empty
one means there is no server behind the name. A lookup that got no answer (a timeout, SERVFAIL or REFUSED from every
nameserver, no nameserver configured) is a failure with its reason: the gateway keeps the servers it had
(membership.py), since a DNS outage says nothing about them. With `--dns-server` the A and AAAA records are asked
apart: the records of a type that answered are the name's servers of that type, even where the other failed (an
IPv4-only name's AAAA query lost), and the answer names the type that failed, whose servers the gateway keeps as they
were (an A query that timed out beside an AAAA "no records" thus removes no IPv4 server); only when both fail is the
lookup a failure.
"""
from __future__ import annotations

import asyncio
import enum
import socket
from dataclasses import dataclass

import dns.asyncresolver
import dns.exception
import dns.resolver

RECORD_TYPES = ("A", "AAAA")
# getaddrinfo's "no such name" and "no address for it" (EAI_NODATA is glibc's, absent elsewhere)
_NO_SUCH_NAME = {socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)}
DNS_PORT = 53


class LookupFailure(enum.Enum):
    TIMEOUT = "timeout"  # no nameserver answered in time
    NO_NAMESERVER = "no_nameserver"  # every nameserver answered SERVFAIL or REFUSED, or none is configured
    ERROR = "error"  # any other failure of the lookup (a malformed answer)


@dataclass(frozen=True)
class DnsAnswer:
    addresses: frozenset[str] = frozenset()
    failure: LookupFailure | None = None  # None: an answer (`addresses`, maybe none)
    detail: str = ""  # dnspython's words, for the log only
    # the record types whose query failed while the other answered (`addresses` holds none of theirs this round)
    failed_types: tuple[str, ...] = ()


def record_type(url: str) -> str:
    """The record type behind a gRPC HOST:PORT the gateway made of an address (`address_url`)."""
    return "AAAA" if url.startswith("[") else "A"


@dataclass(frozen=True)
class HostPort:
    host: str
    port: int

    @classmethod
    def parse(cls, value: str, default_port: int | None = None) -> HostPort:
        """`NAME:PORT`, `[v6]:PORT`, or `NAME` where a default port is given; ValueError otherwise."""
        text = value.strip()
        if text.startswith("["):  # [v6]:PORT or [v6]
            host, _, rest = text[1:].partition("]")
            port = rest.removeprefix(":")
        elif text.count(":") == 1:
            host, port = text.split(":")
        else:  # a name, or a bare IPv6 address
            host, port = text, ""
        if not port and default_port is not None:
            port = str(default_port)
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{value!r} is not NAME:PORT")
        return cls(host, int(port))


def address_url(address: str, port: int) -> str:
    """HOST:PORT of an address, an IPv6 one in brackets."""
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


class DnsResolver:
    """Looks names up at `nameserver` (HOST:PORT) with dnspython, or through the system's resolver."""

    def __init__(self, nameserver: str | None = None, timeout_s: float = 2.0) -> None:
        self._timeout_s = timeout_s
        self._resolver = None
        if nameserver is not None:
            server = HostPort.parse(nameserver, DNS_PORT)
            self._resolver = dns.asyncresolver.Resolver(configure=False)
            self._resolver.nameservers = [server.host]
            self._resolver.port = server.port
            self._resolver.lifetime = timeout_s

    async def lookup(self, name: str) -> DnsAnswer:
        """The A and AAAA records of `name`: the addresses of the record types that answered, and the types whose
        query failed (`failed_types`: an IPv4-only name's AAAA query may time out where its A query answered), whose
        servers the gateway keeps as they were. A failure only where every type's query failed."""
        if self._resolver is None:
            return await self._system(name)
        answers = await asyncio.gather(*(self._records(name, kind) for kind in RECORD_TYPES))
        failed = [a for a in answers if a.failure is not None]
        if len(failed) == len(answers):
            return failed[0]
        addresses = frozenset().union(*(a.addresses for a in answers if a.failure is None))
        failed_types = tuple(kind for kind, a in zip(RECORD_TYPES, answers) if a.failure is not None)
        return DnsAnswer(addresses, detail=failed[0].detail if failed else "", failed_types=failed_types)

    async def _system(self, name: str) -> DnsAnswer:
        try:
            infos = await asyncio.wait_for(asyncio.get_running_loop().getaddrinfo(
                name, None, type=socket.SOCK_STREAM), self._timeout_s)
        except asyncio.TimeoutError:
            return DnsAnswer(failure=LookupFailure.TIMEOUT, detail=f"no answer in {self._timeout_s:g} s")
        except socket.gaierror as exc:
            if exc.errno in _NO_SUCH_NAME:  # an answer: no address behind the name
                return DnsAnswer()
            failure = LookupFailure.TIMEOUT if exc.errno == socket.EAI_AGAIN else LookupFailure.ERROR
            return DnsAnswer(failure=failure, detail=str(exc))
        return DnsAnswer(frozenset(info[4][0] for info in infos if info[0] in (socket.AF_INET, socket.AF_INET6)))

    async def _records(self, name: str, kind: str) -> DnsAnswer:
        try:
            answer = await self._resolver.resolve(name, kind, search=True)
        except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
            return DnsAnswer()
        except dns.exception.Timeout as exc:
            return DnsAnswer(failure=LookupFailure.TIMEOUT, detail=str(exc))
        except (dns.resolver.NoNameservers, dns.resolver.NoResolverConfiguration) as exc:
            return DnsAnswer(failure=LookupFailure.NO_NAMESERVER, detail=str(exc))
        except dns.exception.DNSException as exc:
            return DnsAnswer(failure=LookupFailure.ERROR, detail=str(exc) or type(exc).__name__)
        return DnsAnswer(frozenset(record.address for record in answer))
