"""Serve each model family once (one server per model) and measure streams at a few concurrency levels.

For each `--models` entry: start `tritonserver` through `voxlane serve`'s code, warm up, send
`--sequential` requests one at a time, then each `--concurrency` level at once, and stop. Prints one
JSON line per (model, level): time to first audio (p50, max), real-time factor (per stream: time of
its last chunk over its audio seconds; p50, max) and audio seconds delivered per wall second.

    python -m tools.family_smoke --device cuda --models csm-1b orpheus-3b --concurrency 4 16
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from clients.serve import ServeConfig, Server
from clients.stream import StreamResult, synthesize
from clients.triton_launch import Ports

TEXT = "VoxLane streams speech while the model is still talking."


def summary(results: list[StreamResult], wall_s: float) -> dict:
    rtf = [r.chunks[-1].arrival_s / r.audio_seconds for r in results]
    ttfa = [r.ttfa_s * 1e3 for r in results]
    return {"streams": len(results), "ttfa_ms": [round(t, 1) for t in ttfa],
            "ttfa_ms_p50": round(statistics.median(ttfa), 1),
            "ttfa_ms_max": round(max(ttfa), 1), "rtf_p50": round(statistics.median(rtf), 3),
            "rtf_max": round(max(rtf), 3), "audio_s_per_s": round(sum(r.audio_seconds for r in results) / wall_s, 2),
            "lanes": sorted({c.lane for r in results for c in r.chunks})}


def run_level(url: str, num_streams: int, seconds: float) -> dict:
    started = time.perf_counter()
    with ThreadPoolExecutor(num_streams) as pool:
        results = list(pool.map(lambda i: synthesize(url, f"{TEXT} {i}", seed=i, max_audio_seconds=seconds,
                                                     ignore_eos=True), range(num_streams)))
    return summary(results, time.perf_counter() - started)


def run_sequential(url: str, num_requests: int, seconds: float) -> dict:
    started = time.perf_counter()
    results = [synthesize(url, TEXT, seed=i, max_audio_seconds=seconds, ignore_eos=True) for i in range(num_requests)]
    return summary(results, time.perf_counter() - started)


def measure_model(args, model: str, port_base: int) -> list[dict]:
    config = ServeConfig(model=model, device=args.device, mode=args.mode,
                         ports=Ports(port_base, port_base + 1, port_base + 2))
    started = time.perf_counter()
    rows = []
    with Server(config, log_path=args.log_dir / f"triton-{model}.log") as server:
        base = {"model": model, "mode": args.mode, "device": args.device,
                "startup_s": round(time.perf_counter() - started, 1)}
        synthesize(server.grpc_url, "Warm up.", seed=0, max_audio_seconds=args.seconds, ignore_eos=True)
        rows.append({**base, "level": "sequential", **run_sequential(server.grpc_url, args.sequential, args.seconds)})
        for level in args.concurrency:
            rows.append({**base, "level": level, **run_level(server.grpc_url, level, args.seconds)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["csm-tiny"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--mode", default="voxlane")
    parser.add_argument("--seconds", type=float, default=3.2, help="audio per request")
    parser.add_argument("--sequential", type=int, default=3)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[4, 16])
    parser.add_argument("--log-dir", type=Path, default=Path("."))
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    with open(args.out, "w") if args.out else contextlib.nullcontext() as out:
        for offset, model in enumerate(args.models):
            try:
                rows = measure_model(args, model, 18100 + 10 * offset)
            except (RuntimeError, TimeoutError) as exc:  # a model that fails to serve: report, go on
                rows = [{"model": model, "mode": args.mode, "device": args.device, "error": str(exc)}]
            for row in rows:
                print(json.dumps(row), flush=True)
                if out:  # row by row: a timeout keeps the models measured so far
                    out.write(json.dumps(row) + "\n")
                    out.flush()


if __name__ == "__main__":
    main()
