"""Serve a model in one or more modes and measure a few streams end to end.

For each mode: start `tritonserver` through `voxlane serve`'s code, send
`--sequential` requests one at a time (time to first audio with an idle
server), then `--concurrent` requests at once, and stop. Prints one JSON line
per mode and writes them all to `--out`.

    python tools/serve_smoke.py --device cuda --model qwen3-tts-1.7b --modes voxlane timeshare
"""
from __future__ import annotations

import argparse
import json
import re
import time
import urllib.request
from pathlib import Path

from clients.bench.compare import free_ports
from clients.serve import MODES, ServeConfig, Server
from clients.stream import synthesize
from clients.triton_launch import Ports
from tools.family_smoke import run_level, run_sequential


def measure(url: str, seconds: float, sequential: int, concurrent: int) -> dict:
    synthesize(url, "Warm up.", seed=0, max_audio_seconds=seconds, ignore_eos=True)
    alone = run_sequential(url, sequential, seconds)
    together = run_level(url, concurrent, seconds)
    return {
        "ttfa_ms_idle": alone["ttfa_ms"],
        "ttfa_ms_idle_p50": alone["ttfa_ms_p50"],
        "rtf_idle": alone["rtf_p50"],
        "concurrent": concurrent,
        "ttfa_ms_concurrent_p50": together["ttfa_ms_p50"],
        "ttfa_ms_concurrent_max": together["ttfa_ms_max"],
        "audio_s_per_s_concurrent": together["audio_s_per_s"],
        "lanes": sorted(set(alone["lanes"]) | set(together["lanes"])),
    }


def codec_latency(metrics_port: int) -> dict:
    """Mean codec-call latency per lane over the run, from the server's voxlane_codec_ms histogram."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    totals: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        match = re.match(r'^voxlane_codec_ms_(sum|count)\{lane="(\w+)"\} ([0-9.e+-]+)$', line)
        if match:
            totals.setdefault(match.group(2), {})[match.group(1)] = float(match.group(3))
    return {f"codec_ms_mean_{lane}": round(v["sum"] / v["count"], 2)
            for lane, v in totals.items() if v.get("count")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen3-tts-tiny")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--modes", nargs="+", default=["voxlane"], choices=MODES)
    parser.add_argument("--seconds", type=float, default=1.6, help="audio per request")
    parser.add_argument("--sequential", type=int, default=5)
    parser.add_argument("--concurrent", type=int, default=8)
    parser.add_argument("--first-chunk-frames", type=int, nargs="+", default=[2],
                        help="run each mode once per first-chunk size")
    parser.add_argument("--log-dir", type=Path, default=Path("."))
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    rows = []
    for mode, first in ((m, f) for m in args.modes for f in args.first_chunk_frames):
        config = ServeConfig(model=args.model, device=args.device, mode=mode, ports=Ports(*free_ports(3)),
                             first_chunk_frames=first)
        started = time.perf_counter()
        with Server(config, log_path=args.log_dir / f"triton-{mode}-fc{first}.log") as server:
            row = {"mode": mode, "first_chunk_frames": first, "model": args.model, "device": args.device,
                   "startup_s": round(time.perf_counter() - started, 1)}
            row.update(measure(server.grpc_url, args.seconds, args.sequential, args.concurrent))
            row.update(codec_latency(config.ports.metrics))
        print(json.dumps(row), flush=True)
        rows.append(row)
    if args.out:
        args.out.write_text("\n".join(json.dumps(r) for r in rows) + "\n")


if __name__ == "__main__":
    main()
