"""The `bench` and `plot` subcommands of `voxlane` (`compare`, which starts servers, is `server/cli.py`'s)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable

from clients.bench.arrivals import ARRIVALS
from clients.bench.config import PROTOCOLS, BenchConfig, smoke_config


def add_commands(subparsers) -> dict[str, Callable[[argparse.Namespace], int]]:
    """Add bench and plot to `voxlane`'s subparsers; return their handlers by name."""
    bench = subparsers.add_parser("bench", help="open-loop streaming load: TTFA, stalls, SLO attainment, capacity")
    bench.add_argument("--url", default="localhost:8001",
                       help="gRPC HOST:PORT of a running server (the gateway's HOST:PORT with --protocol openai)")
    bench.add_argument("--protocol", choices=PROTOCOLS, default="grpc",
                       help="grpc: Triton's stream; openai: POST /v1/audio/speech to the gateway (raw PCM)")
    add_bench_flags(bench)
    bench.add_argument("--export-perf-analyzer", type=Path, default=None, metavar="DIR",
                       help="write each run's plan as perf_analyzer input data, request intervals and a command; "
                            "send nothing")
    bench.add_argument("--from-perf-analyzer", type=Path, nargs="+", default=None, metavar="EXPORT.json",
                       help="TTFA, chunk gaps and stalls from perf_analyzer --profile-export-file files; send nothing")
    plot = subparsers.add_parser("plot", help="plot attainment, p99 TTFA and goodput vs rate "
                                 "(and the lanes under load beside) from results.json files")
    plot.add_argument("results", nargs="+", type=Path, help="results.json files (or their directories)")
    plot.add_argument("-o", "--output", type=Path, default=Path("bench.png"))
    plot.add_argument("--figure", choices=("curves", "capacity", "past"), default="curves",
                      help="curves: attainment, p99 TTFA and goodput vs rate (bands over seeds) and the lanes; "
                           "capacity: capacity at 90%% and 99%% per results file, each seed's as a dot; "
                           "past: completed req/s, attainment and stall rate vs rate (past capacity)")
    return {"bench": _bench, "plot": _plot}


def add_bench_flags(parser: argparse.ArgumentParser) -> None:
    """The flags `bench` and `compare` share: the load, the SLO and where the results go."""
    parser.add_argument("--rates", nargs="+", type=float, default=None, help="requests/s (default 1 2 4 8)")
    parser.add_argument("--duration", type=float, default=None, help="seconds of arrivals per run (default 60)")
    parser.add_argument("--seeds", type=int, default=1, help="runs per rate, seeds 0..N-1")
    parser.add_argument("--arrival", choices=ARRIVALS, default="poisson")
    parser.add_argument("--burstiness", type=float, default=1.0, help="Gamma shape (< 1 burstier)")
    parser.add_argument("--workload", default=None,
                        help="TSV (utterance_id, duration_s, text), or a shared workload's name: 'short' (the default, "
                             "4-10 s) or 'paragraphs' (long-form, 12.6-68 s)")
    parser.add_argument("--ttfa-slo-ms", type=float, default=200.0)
    parser.add_argument("--out", type=Path, default=Path("bench-results"))
    parser.add_argument("--max-audio-seconds", type=float, default=None, help="cap on each request's audio")
    parser.add_argument("--audio-scale", type=float, default=1.0, help="request duration × this")
    parser.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false",
                        help="let the model stop on its own (real weights)")
    parser.add_argument("--voice", default=None)
    parser.add_argument("--channels", type=int, default=4, help="gRPC connections the streams share")
    parser.add_argument("--search", type=int, default=0, metavar="STEPS",
                        help="bisection steps for the 90%% capacity after the sweep")
    parser.add_argument("--bracket", type=float, default=0.0, metavar="WIDTH",
                        help="after the sweep, more rates until the 90%% and 99%% capacities each lie between "
                             "two measured rates at most WIDTH req/s apart")
    parser.add_argument("--max-rates", type=int, default=8, help="the most rates one run measures with --bracket")
    parser.add_argument("--text-rate", type=float, default=None, metavar="TOKENS_PER_S",
                        help="stream each request's text in token-like pieces at this pace (an LLM's), as a "
                             "streaming-text session; TTFA counts from the first piece, stalls are split into "
                             "the text's and the server's (default: whole-text requests)")
    parser.add_argument("--audio-in-rate", type=float, default=None, metavar="TIMES_REAL_TIME",
                        help="make each request an audio-in session (a model that listens, tse-*): its input, seeded "
                             "noise as long as its audio, sent in 80-ms pieces at this many times real time (1: "
                             "a live microphone); TTFA counts from the first piece, stalls are split into the "
                             "input's and the server's, and each chunk's algorithmic latency is reported")
    parser.add_argument("--metrics-url", default=None,
                        help="the server's Prometheus endpoint, for the LM's time, the lanes and the first "
                             "audio's phases per rate (default: port 8002 on the --url host with --protocol grpc; "
                             "through a gateway, --protocol openai, only where it is given)")
    parser.add_argument("--smoke", action="store_true",
                        help="CPU smoke run: rates 1 2, 4 s each, 1.2 s requests (flags given still apply)")


def bench_config(args: argparse.Namespace, url: str) -> BenchConfig:
    base = smoke_config(url, args.out) if args.smoke else BenchConfig(url=url)
    return BenchConfig(
        url=url, rates=tuple(args.rates) if args.rates else base.rates,
        duration_s=args.duration or base.duration_s, num_seeds=args.seeds, arrival=args.arrival,
        burstiness=args.burstiness, workload=args.workload, ttfa_slo_ms=args.ttfa_slo_ms, out=args.out,
        audio_scale=args.audio_scale, max_audio_seconds=args.max_audio_seconds or base.max_audio_seconds,
        ignore_eos=args.ignore_eos, voice=args.voice,
        num_channels=args.channels if not args.smoke else base.num_channels, search_steps=args.search,
        bracket_width=args.bracket, max_rates=args.max_rates,
        protocol=getattr(args, "protocol", "grpc"), metrics_url=args.metrics_url, text_rate=args.text_rate,
        audio_in_rate=args.audio_in_rate)


def _bench(args: argparse.Namespace) -> int:
    from clients.bench.runner import BenchError, run_bench
    config = bench_config(args, args.url)  # --export/--from-perf-analyzer: clients/cli.py hands those over
    try:
        results = run_bench(config)
    except BenchError as exc:
        print(f"voxlane: bench: {exc}", file=sys.stderr)
        return 1
    print(f"server mode {results['server']['mode']}; capacity at 90% "
          f"{_capacity(results['capacity']['0.90'])}, at 99% {_capacity(results['capacity']['0.99'])} req/s; "
          f"wrote {config.out / 'results.json'}")
    return 0


def _plot(args: argparse.Namespace) -> int:
    from clients.bench.plot import plot_results
    from clients.bench.plot_lanes import has_lanes, lanes_path, plot_lanes
    from clients.bench.runner import load_results
    results = [load_results(p) for p in args.results]
    if args.figure == "capacity":
        from clients.bench.plot_capacity import plot_capacity
        print(f"wrote {plot_capacity(results, args.output)}")
        return 0
    if args.figure == "past":
        from clients.bench.plot_past import plot_past
        print(f"wrote {plot_past(results, args.output)}")
        return 0
    print(f"wrote {plot_results(results, args.output)}")
    if has_lanes(results):  # a second figure: the lanes under load
        print(f"wrote {plot_lanes(results, lanes_path(args.output))}")
    return 0


def _capacity(cap: dict) -> str:
    if cap["rate"] is None:
        return "unknown"
    return (">= " if cap["is_lower_bound"] else "") + f"{cap['rate']:g}"
