"""What one client may hold in the gateway at once, so that no client harms the others.

A client is its API key (where keys are set) and its address: each has its own count of streams in flight (a speech
request, a WebSocket session, a voice upload) and of bytes the gateway holds for it (request bodies as they are read,
audio read from Triton that its HTTP client has not taken yet). A stream that would pass a cap of the key or of the
address is refused at once with 429 `too_many_streams` or `too_many_bytes` and `Retry-After`, before its body is
read; a stream whose unread audio passes the byte cap while it runs is ended (its client reads too slowly to keep it).

The caps are per gateway process. Behind a proxy every client has the proxy's address: lift the address cap there
(`--max-streams-per-address 0`) and let the keys tell the clients apart.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from server.gateway.errors import ApiError, too_many

ADDRESS, KEY = "address", "key"  # the kinds of identity a client has


@dataclass(frozen=True)
class ClientCaps:
    """Per client: streams in flight (per key, per address; 0: no cap) and bytes held (per key and per address)."""

    max_streams_per_key: int = 64
    max_streams_per_address: int = 64
    max_bytes: int = 64 << 20

    def __post_init__(self) -> None:
        if min(self.max_streams_per_key, self.max_streams_per_address) < 0 or self.max_bytes < 1:
            raise ValueError(f"client caps must be >= 0 (streams) and >= 1 (bytes), got {self}")

    def max_streams(self, kind: str) -> int:
        return self.max_streams_per_key if kind == KEY else self.max_streams_per_address


@dataclass
class Lease:
    """One stream's share of its client's caps; `charge` and `refund` its bytes as they come and go."""

    table: "ClientTable"
    identities: tuple[tuple[str, str], ...]
    num_bytes: int = 0
    is_released: bool = field(default=False)

    def charge(self, num_bytes: int) -> bool:
        """Hold `num_bytes` more for this client; False (nothing held) where that passes its byte cap."""
        if not self.table.can_hold(self.identities, num_bytes):
            return False
        self.table.add_bytes(self.identities, num_bytes)
        self.num_bytes += num_bytes
        return True

    def refund(self, num_bytes: int) -> None:
        num_bytes = min(num_bytes, self.num_bytes)
        self.table.add_bytes(self.identities, -num_bytes)
        self.num_bytes -= num_bytes

    def release(self) -> None:
        """The stream ended: its slot and every byte it still held go back."""
        if not self.is_released:
            self.is_released = True
            self.refund(self.num_bytes)
            self.table.add_streams(self.identities, -1)


class ClientTable:
    """Streams and bytes per identity, in the gateway's one event loop (no lock needed)."""

    def __init__(self, caps: ClientCaps) -> None:
        self.caps = caps
        self._streams: Counter[tuple[str, str]] = Counter()
        self._bytes: Counter[tuple[str, str]] = Counter()

    def admit(self, identities: tuple[tuple[str, str], ...], body_bytes: int) -> Lease | ApiError:
        """A new stream of the client with `identities` whose body will be `body_bytes`: its lease, or the 429."""
        for identity in identities:
            cap = self.caps.max_streams(identity[0])
            if cap and self._streams[identity] >= cap:
                return too_many("too_many_streams", f"this {identity[0]} has {cap} streams in flight, the most one "
                                                    "client may have at once; retry when one has ended")
        if not self.can_hold(identities, body_bytes):
            return too_many("too_many_bytes", f"this client's requests in flight already hold close to "
                                              f"{self.caps.max_bytes} bytes in the gateway; retry when one has ended")
        self.add_streams(identities, 1)
        lease = Lease(self, identities)
        lease.charge(body_bytes)
        return lease

    def can_hold(self, identities: tuple[tuple[str, str], ...], num_bytes: int) -> bool:
        return all(self._bytes[identity] + num_bytes <= self.caps.max_bytes for identity in identities)

    def add_streams(self, identities: tuple[tuple[str, str], ...], delta: int) -> None:
        for identity in identities:
            self._streams[identity] += delta
            if self._streams[identity] <= 0:
                del self._streams[identity]

    def add_bytes(self, identities: tuple[tuple[str, str], ...], delta: int) -> None:
        for identity in identities:
            self._bytes[identity] += delta
            if self._bytes[identity] <= 0:
                del self._bytes[identity]

    def num_streams(self, identity: tuple[str, str]) -> int:
        return self._streams[identity]

    def num_bytes(self, identity: tuple[str, str]) -> int:
        return self._bytes[identity]
