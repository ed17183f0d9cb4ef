"""The `gateway` subcommand of `voxlane`."""
from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Callable

from server.gateway.auth import ADMIN_KEYS_ENV, API_KEYS_ENV, Keys, read_keys
from server.gateway.config import GatewayConfig
from server.gateway.limits import ClientCaps


def add_gateway_command(subparsers) -> dict[str, Callable[[argparse.Namespace], int]]:
    parser = subparsers.add_parser("gateway", help="OpenAI-compatible /v1/audio/speech in front of Triton servers")
    parser.add_argument("--triton", type=_urls, default=None,
                        help="gRPC HOST:PORT of each Triton server, comma-separated (default: localhost:8001 where "
                             "no --triton-dns is given)")
    parser.add_argument("--triton-metrics", type=_urls, default=(),
                        help="each server's metrics URL (same order), to cross-check its live streams")
    add_dns_flags(parser)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--model-name", default=None,
                        help="the default model's id, listed first (default: its served preset); each server says "
                             "which model it serves")
    parser.add_argument("--served-model-name", action="append", default=[], metavar="NAME",
                        help="another id that answers as the default model (repeat for several); each served "
                             "checkpoint's own id always does")
    parser.add_argument("--default-model", default=None, metavar="ID",
                        help="with several models behind the gateway: an id of the one OpenAI's model names "
                             "(tts-1, ...) and --model-name mean (default: the model of the first server that "
                             "answered)")
    parser.add_argument("--write-timeout-s", type=float, default=GatewayConfig.write_timeout_s,
                        help="drop an HTTP client that takes no chunk this long (its stream is cancelled)")
    add_client_flags(parser)
    add_key_flags(parser)
    return {"gateway": _gateway}


def add_dns_flags(parser: argparse.ArgumentParser) -> None:
    """Servers from DNS (membership.py): a headless Service's name answers its pods' addresses."""
    parser.add_argument("--triton-dns", action="append", default=[], metavar="NAME:PORT",
                        help="a DNS name whose A/AAAA records are Triton servers, each at gRPC PORT (repeat for "
                             "several; beside --triton): asked again every --dns-interval-s; an address that "
                             "appears takes streams once ready, one that goes takes no new stream and finishes "
                             "its live ones; a failed lookup keeps the servers it had, an empty answer leaves none")
    parser.add_argument("--dns-interval-s", type=float, default=GatewayConfig.dns_interval_s,
                        help="how often each --triton-dns name is asked again")
    parser.add_argument("--dns-server", default=None, metavar="HOST[:PORT]",
                        help="the nameserver to ask, with dnspython (default: the host's lookup, getaddrinfo: the "
                             "hosts file, then /etc/resolv.conf's nameservers)")
    parser.add_argument("--max-servers", type=int, default=GatewayConfig.max_servers, metavar="N",
                        help="the most servers the --triton-dns names hold together, those that left DNS and "
                             "still finish streams among them; addresses past it are not added (the servers "
                             "already in keep their place, the others are taken in sorted order) and a warning "
                             "says which")
    parser.add_argument("--forget-after-s", type=float, default=GatewayConfig.forget_after_s, metavar="S",
                        help="how long a server gone from DNS keeps its place (its state, its channels) once it holds "
                             "no stream, so that a record that flaps back finds it as it was")
    parser.add_argument("--metrics-port", "--triton-metrics-port", dest="triton_metrics_port", type=int,
                        metavar="PORT", default=GatewayConfig.triton_metrics_port,
                        help="the metrics port of each server a --triton-dns name answers (as `voxlane serve "
                             "--metrics-port`): http://ADDRESS:PORT/metrics, scraped to cross-check its live "
                             "streams (0: not scraped)")


def add_client_flags(parser: argparse.ArgumentParser) -> None:
    """What one client may hold in the gateway (limits.py) and how long a request may take to arrive."""
    caps = ClientCaps()
    parser.add_argument("--read-timeout-s", type=float, default=GatewayConfig.read_timeout_s,
                        help="a request's headers, then its body, must arrive within this (else the connection "
                             "closes; 408 for a body)")
    parser.add_argument("--max-streams-per-key", type=int, default=caps.max_streams_per_key,
                        help="streams one API key may have in flight (0: no cap); past it, 429")
    parser.add_argument("--max-streams-per-address", type=int, default=caps.max_streams_per_address,
                        help="streams one client address may have in flight (0: no cap; behind a proxy every client "
                             "has its address)")
    parser.add_argument("--max-client-bytes", type=int, default=caps.max_bytes,
                        help="bytes the gateway holds for one key or address: bodies being read, audio its client has "
                             "not taken")


def client_caps(args: argparse.Namespace) -> ClientCaps:
    return ClientCaps(args.max_streams_per_key, args.max_streams_per_address, args.max_client_bytes)


def add_key_flags(parser: argparse.ArgumentParser) -> None:
    """The gateway's keys (auth.py); files or the environment keep them off the command line."""
    parser.add_argument("--api-key", action="append", default=[], metavar="KEY",
                        help="a key clients send as 'Authorization: Bearer KEY' (several: repeat); "
                             f"also --api-key-file and ${API_KEYS_ENV}")
    parser.add_argument("--api-key-file", action="append", default=[], metavar="FILE",
                        help="API keys, one per line")
    parser.add_argument("--admin-key", action="append", default=[], metavar="KEY",
                        help="a key for the voice registry's writes (register, delete); "
                             f"also --admin-key-file and ${ADMIN_KEYS_ENV}")
    parser.add_argument("--admin-key-file", action="append", default=[], metavar="FILE",
                        help="admin keys, one per line")


def gateway_keys(args: argparse.Namespace) -> Keys:
    return Keys(api=frozenset(read_keys(args.api_key, args.api_key_file, API_KEYS_ENV)),
                admin=frozenset(admin_keys(args)))


def admin_keys(args: argparse.Namespace) -> tuple[str, ...]:
    """The admin keys in the order given (`voxlane serve` restricts Triton's repository API to the first)."""
    return read_keys(args.admin_key, args.admin_key_file, ADMIN_KEYS_ENV)


def gateway_config(args: argparse.Namespace) -> GatewayConfig:
    tritons = args.triton if args.triton is not None else () if args.triton_dns else GatewayConfig.tritons
    return GatewayConfig(tritons=tritons, metrics_urls=args.triton_metrics, host=args.host, port=args.port,
                         triton_dns=tuple(args.triton_dns), dns_interval_s=args.dns_interval_s,
                         dns_server=args.dns_server, triton_metrics_port=args.triton_metrics_port,
                         max_servers=args.max_servers, forget_after_s=args.forget_after_s,
                         model_name=args.model_name, served_model_names=tuple(args.served_model_name),
                         default_model=args.default_model,
                         write_timeout_s=args.write_timeout_s, read_timeout_s=args.read_timeout_s,
                         client_caps=client_caps(args), keys=gateway_keys(args))


def _urls(value: str) -> tuple[str, ...]:
    return tuple(u.strip() for u in value.split(",") if u.strip())


def _gateway(args: argparse.Namespace) -> int:
    from server.gateway.request_ids import configure_logging
    from server.gateway.server import serve_gateway
    configure_logging()
    try:
        config = gateway_config(args)
    except (OSError, ValueError) as exc:  # a key file that cannot be read, a key too short
        print(f"voxlane: gateway: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(serve_gateway(config, on_ready=lambda line: print(line, flush=True)))
    except (RuntimeError, OSError) as exc:  # no server answered; the port is taken
        print(f"voxlane: gateway: {exc}", file=sys.stderr)
        return 1
    return 0
