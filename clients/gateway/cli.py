"""The `gateway` subcommand of `voxlane`."""
from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from typing import Callable

from clients.gateway.config import GatewayConfig


def add_gateway_command(subparsers) -> dict[str, Callable[[argparse.Namespace], int]]:
    parser = subparsers.add_parser("gateway", help="OpenAI-compatible /v1/audio/speech in front of Triton servers")
    parser.add_argument("--triton", type=_urls, default=("localhost:8001",),
                        help="gRPC HOST:PORT of each Triton server, comma-separated")
    parser.add_argument("--triton-metrics", type=_urls, default=(),
                        help="each server's metrics URL (same order), to cross-check its live streams")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--model-name", default=None, help="the model id clients send (default: the served preset)")
    parser.add_argument("--write-timeout-s", type=float, default=GatewayConfig.write_timeout_s,
                        help="drop an HTTP client that takes no bytes this long (its stream is cancelled)")
    return {"gateway": _gateway}


def gateway_config(args: argparse.Namespace) -> GatewayConfig:
    return GatewayConfig(tritons=args.triton, metrics_urls=args.triton_metrics, host=args.host, port=args.port,
                         model_name=args.model_name, write_timeout_s=args.write_timeout_s)


def _urls(value: str) -> tuple[str, ...]:
    return tuple(u.strip() for u in value.split(",") if u.strip())


def _gateway(args: argparse.Namespace) -> int:
    from clients.gateway.server import serve_gateway
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        asyncio.run(serve_gateway(gateway_config(args), on_ready=lambda line: print(line, flush=True)))
    except (RuntimeError, OSError) as exc:  # no server answered; the port is taken
        print(f"voxlane: gateway: {exc}", file=sys.stderr)
        return 1
    return 0
