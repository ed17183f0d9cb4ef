"""The gateway's settings, built once from the command line."""
from __future__ import annotations

from dataclasses import dataclass, field

from server.gateway.auth import Keys
from server.gateway.limits import ClientCaps
from server.gateway.resolver import DNS_PORT, HostPort


# the settings `voxlane gateway` takes as flags, named so in an error (the others are the embedder's)
_FLAGS = {"dns_interval_s": "--dns-interval-s", "forget_after_s": "--forget-after-s",
          "read_timeout_s": "--read-timeout-s", "write_timeout_s": "--write-timeout-s"}


@dataclass(frozen=True)
class GatewayConfig:
    tritons: tuple[str, ...] = ("localhost:8001",)  # gRPC HOST:PORT of each Triton server
    metrics_urls: tuple[str, ...] = ()  # each server's metrics URL (same order), for the live-stream cross-check
    # DNS NAME:PORT each (a headless Service's name, the gRPC port): the servers are the addresses the name answers,
    # asked again every `dns_interval_s` (membership.py)
    triton_dns: tuple[str, ...] = ()
    dns_interval_s: float = 5.0
    dns_server: str | None = None  # HOST[:PORT] of the nameserver to ask; None: the system's (/etc/resolv.conf)
    triton_metrics_port: int = 8002  # a DNS server's metrics port: http://ADDRESS:PORT/metrics (0: not scraped)
    forget_after_s: float = 60.0  # a server gone from DNS keeps its place this long after it left (and its streams)
    # the most servers the DNS names hold together (a name that answers more adds none past it: membership.py); it
    # bounds the channels, polls and scrapes a wrong or hostile answer can make the gateway hold
    max_servers: int = 64
    default_model: str | None = None  # an id of the model OpenAI's names mean (catalog.py); None: the first learned
    host: str = "127.0.0.1"
    port: int = 9000
    model_name: str | None = None  # the id in /v1/models; None: the servers' model parameter
    served_model_names: tuple[str, ...] = ()  # more ids that answer as the same model (--served-model-name)
    channels_per_server: int = 4  # gRPC connections the streams to one server share
    request_timeout_s: float = 600.0  # a whole stream
    scrape_interval_s: float = 0.5
    down_s: float = 2.0  # a server that refused a connection, or has a lane down, is skipped this long
    readiness_interval_s: float = 0.5  # how often each server's readiness is asked (readiness.py)
    max_attempts: int = 2  # servers a stream refused with 503 before any audio is tried on: one retry
    startup_timeout_s: float = 60.0  # for a first server to answer
    write_timeout_s: float = 30.0  # an HTTP client that takes no chunk this long is dropped (its stream cancelled)
    # a connection's request line and headers must arrive within this of its start (or of its last response), and a
    # request's body within this of its headers; else the connection is closed (408 for a body)
    read_timeout_s: float = 30.0
    # what the kernel holds of one response's bytes that its client has not read: small, so that a client that stops
    # reading stops taking audio at once (the server then pauses its stream) and meets the write timeout
    send_buffer_bytes: int = 64 << 10
    client_caps: ClientCaps = field(default_factory=ClientCaps)  # per client: streams and bytes (limits.py)
    registry_timeout_s: float = 60.0  # a call to a server's voice_registry (a register encodes the reference)
    keys: Keys = field(default_factory=Keys)  # API and admin keys (auth.py); none: open

    def __post_init__(self) -> None:
        if not (self.tritons or self.triton_dns) or not all(self.tritons):
            raise ValueError("--triton needs at least one HOST:PORT (or --triton-dns a NAME:PORT)")
        for name in self.triton_dns:
            HostPort.parse(name)  # ValueError: not NAME:PORT
        if self.dns_server is not None:
            HostPort.parse(self.dns_server, DNS_PORT)
        if self.max_servers < 1:
            raise ValueError("--max-servers must be >= 1")
        if not 0 <= self.triton_metrics_port <= 65535:
            raise ValueError("--metrics-port must be in [0, 65535]")
        if self.metrics_urls and len(self.metrics_urls) != len(self.tritons):
            raise ValueError(f"--triton-metrics has {len(self.metrics_urls)} URLs for {len(self.tritons)} servers")
        if not 0 <= self.port <= 65535 or self.channels_per_server < 1:
            raise ValueError("--port must be in [0, 65535] and channels per server >= 1")
        if self.max_attempts < 1:
            raise ValueError("a stream needs at least one attempt")
        positive = ("request_timeout_s", "scrape_interval_s", "down_s", "startup_timeout_s", "readiness_interval_s",
                    "write_timeout_s", "registry_timeout_s", "read_timeout_s", "send_buffer_bytes", "dns_interval_s",
                    "forget_after_s")
        if bad := [name for name in positive if not getattr(self, name) > 0]:
            raise ValueError("timeouts and intervals must be > 0: " + ", ".join(
                f"{_FLAGS.get(name, name)} {getattr(self, name):g}" for name in bad))
