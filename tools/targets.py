"""The engine targets of one serving mode, from one server start.

Starts `tritonserver` through `voxlane serve`'s code and measures, in order: its start-up time;
time to first audio on an idle server (`--sequential` short requests one at a time); `--streams`
streams of `--stream-seconds` started at once (TTFA p50/p99, audio seconds per wall second); then
`voxlane bench` over `--rates` on the workload (capacity, and the LM's time per phase per rate).
Writes one JSON file with everything.

    python -m tools.targets --device cuda --model qwen3-tts-1.7b --mode voxlane \\
        --workload WORKLOAD.tsv --rates 10 20 30 40 --out targets-voxlane.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from server.compare import free_ports
from clients.bench.config import BenchConfig
from clients.bench.runner import run_bench
from server.serve import MODES, ServeConfig, Server, ServingMode
from server.triton_launch import Ports
from tools.smoke import run_concurrent, run_sequential


def streams_summary(results, wall_s: float) -> dict:
    ttfa = np.array([r.ttfa_s * 1e3 for r in results])
    audio = sum(r.audio_seconds for r in results)
    return {"num_streams": len(results), "ttfa_ms_p50": round(float(np.percentile(ttfa, 50)), 1),
            "ttfa_ms_p99": round(float(np.percentile(ttfa, 99)), 1), "ttfa_ms_max": round(float(ttfa.max()), 1),
            "audio_s": round(audio, 2), "wall_s": round(wall_s, 2),
            "audio_s_per_s": round(audio / wall_s, 1)}


def measure(args: argparse.Namespace) -> dict:
    shares = {} if args.codec_sm_pct is None else {"codec_sm_pct": args.codec_sm_pct,
                                                   "lm_sm_pct": 100 - args.codec_sm_pct}
    config = ServeConfig(model=args.model, device=args.device, mode=ServingMode(args.mode),
                         ports=Ports(*free_ports(3)), **shares)
    started = time.perf_counter()
    report: dict = {"model": args.model, "mode": args.mode, "codec_sm_pct": config.codec_sm_pct}
    with Server(config, log_path=args.log) as server:
        report["startup_s"] = round(time.perf_counter() - started, 1)
        run_sequential(server.grpc_url, 2, 1.6)  # warm-up
        idle = [r.ttfa_s * 1e3 for r in run_sequential(server.grpc_url, args.sequential, 1.6)]
        report["idle_ttfa_ms"] = {"p50": round(statistics.median(idle), 1), "max": round(max(idle), 1)}
        level_start = time.perf_counter()
        results = run_concurrent(server.grpc_url, args.streams, args.stream_seconds)
        report["streams"] = streams_summary(results, time.perf_counter() - level_start)
        print(json.dumps(report), flush=True)
        if args.rates:
            bench = replace(BenchConfig(), url=server.grpc_url, rates=tuple(args.rates), duration_s=args.duration,
                            workload=args.workload, max_audio_seconds=args.max_audio_seconds,
                            metrics_url=server.metrics_url, out=args.bench_out)
            result = run_bench(bench)
            report["capacity"] = result["capacity"]
            report["summaries"] = result["summaries"]
    return report


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen3-tts-1.7b")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    parser.add_argument("--mode", choices=MODES, default="voxlane")
    parser.add_argument("--codec-sm-pct", type=int, default=None, help="the codec lanes' MPS share (LM: 100 - it)")
    parser.add_argument("--sequential", type=int, default=8)
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--stream-seconds", type=float, default=12.0)
    parser.add_argument("--rates", type=float, nargs="*", default=[])
    parser.add_argument("--duration", type=float, default=8.0, help="seconds of arrivals per rate")
    parser.add_argument("--workload", type=Path, default=None)
    parser.add_argument("--max-audio-seconds", type=float, default=6.0)
    parser.add_argument("--log", type=Path, default=Path("tritonserver-targets.log"))
    parser.add_argument("--bench-out", type=Path, default=Path("bench-targets"))
    parser.add_argument("--out", type=Path, default=None)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    report = measure(args)
    text = json.dumps(report, indent=1)
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
