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
    parser.add_argument("--triton", type=_urls, default=("localhost:8001",),
                        help="gRPC HOST:PORT of each Triton server, comma-separated")
    parser.add_argument("--triton-metrics", type=_urls, default=(),
                        help="each server's metrics URL (same order), to cross-check its live streams")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--model-name", default=None, help="the model id clients send (default: the served preset)")
    parser.add_argument("--served-model-name", action="append", default=[], metavar="NAME",
                        help="another id that answers as the same model (repeat for several); the served "
                             "checkpoint's own id always does")
    parser.add_argument("--write-timeout-s", type=float, default=GatewayConfig.write_timeout_s,
                        help="drop an HTTP client that takes no chunk this long (its stream is cancelled)")
    add_client_flags(parser)
    add_key_flags(parser)
    return {"gateway": _gateway}


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
    return GatewayConfig(tritons=args.triton, metrics_urls=args.triton_metrics, host=args.host, port=args.port,
                         model_name=args.model_name, served_model_names=tuple(args.served_model_name),
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
