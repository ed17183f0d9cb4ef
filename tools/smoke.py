"""Serve each (model, mode, first-chunk size) once and measure a few streams end to end.

For each server: start `tritonserver` through `voxlane serve`'s code, warm up, send `--sequential`
requests one at a time (time to first audio with an idle server), then each `--concurrency` level
at once, and stop. Prints one JSON line per (server, level), and writes each to `--out` as it is
measured (a timeout keeps the rows so far): time to first audio (p50, max), real-time factor (per
stream: time of its last chunk over its audio seconds; p50, max), audio seconds delivered per wall
second, the lanes that decoded, the mean codec-call latency per lane during that level, and the LM lane's
account over it (seconds per loop phase, decode steps, their mean rows, decode ms a step). A
server that fails to start is reported as a row with `error`; the others still run (exit status 1).

    python -m tools.smoke --device cuda --models qwen3-tts-1.7b --modes voxlane timeshare
    python -m tools.smoke --device cuda --models csm-1b orpheus-3b --sequential 3 --concurrency 4 16
"""
from __future__ import annotations

import argparse
import contextlib
import json
import re
import statistics
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from protocol.metrics import parse_sum
from server.compare import free_ports
from server.serve import MODES, ServeConfig, Server
from clients.stream import StreamResult, synthesize
from server.triton_launch import Ports

TEXT = "VoxLane streams speech while the model is still talking."
LM_FLUSH_WAIT_S = 1.5
_CODEC_MS = re.compile(r'^voxlane_codec_ms_(sum|count)\{lane="(\w+)"\} ([0-9.e+-]+)$')
# the LM lane's loop account (engine/timing.py LoopPhase), and its decode steps' batch sizes (a histogram)
LM_PHASES = ("prefill", "decode", "host", "idle")
_LM_METRICS = {**{phase: f"voxlane_lm_{phase}_seconds_total" for phase in LM_PHASES},
               "rows": "voxlane_lm_step_batch_sum", "steps": "voxlane_lm_step_batch_count"}


def summary(results: list[StreamResult], wall_s: float) -> dict:
    """TTFA, real-time factor and throughput of one level's streams."""
    rtf = [r.chunks[-1].arrival_s / r.audio_seconds for r in results]
    ttfa = [r.ttfa_s * 1e3 for r in results]
    return {"streams": len(results), "ttfa_ms": [round(t, 1) for t in ttfa],
            "ttfa_ms_p50": round(statistics.median(ttfa), 1),
            "ttfa_ms_max": round(max(ttfa), 1), "rtf_p50": round(statistics.median(rtf), 3),
            "rtf_max": round(max(rtf), 3), "audio_s_per_s": round(sum(r.audio_seconds for r in results) / wall_s, 2),
            "lanes": sorted({c.lane for r in results for c in r.chunks})}


def run_sequential(url: str, num_requests: int, seconds: float) -> list[StreamResult]:
    return [synthesize(url, TEXT, seed=i, max_audio_seconds=seconds, ignore_eos=True) for i in range(num_requests)]


def run_concurrent(url: str, num_streams: int, seconds: float) -> list[StreamResult]:
    with ThreadPoolExecutor(num_streams) as pool:
        return list(pool.map(lambda i: synthesize(url, f"{TEXT} {i}", seed=i, max_audio_seconds=seconds,
                                                  ignore_eos=True), range(num_streams)))


def codec_totals(metrics_text: str) -> dict[str, dict[str, float]]:
    """{lane: {"sum": ms, "count": calls}} of the server's voxlane_codec_ms histogram."""
    totals: dict[str, dict[str, float]] = {}
    for line in metrics_text.splitlines():
        match = _CODEC_MS.match(line)
        if match:
            totals.setdefault(match.group(2), {})[match.group(1)] = float(match.group(3))
    return totals


def lm_totals(metrics_text: str) -> dict[str, float]:
    """The LM lane's seconds per loop phase, and its decode steps and their rows, since it started."""
    totals = {key: parse_sum(metrics_text, name) for key, name in _LM_METRICS.items()}
    return {key: value for key, value in totals.items() if value is not None}


def lm_account(before: dict, after: dict) -> dict:
    """Where the LM lane's time went over one level: seconds per phase, its decode steps, their mean rows and
    the mean seconds a step (decode phase over steps). Empty where the server exports no LM account. Idle seconds
    include the wait for the account's export after the level (`LM_FLUSH_WAIT_S`)."""
    if not after:
        return {}
    delta = {key: after.get(key, 0.0) - before.get(key, 0.0) for key in after}
    steps = delta.get("steps", 0.0)
    account = {f"lm_{phase}_s": round(delta.get(phase, 0.0), 3) for phase in LM_PHASES}
    account["lm_steps"] = int(steps)
    if steps:
        account["lm_rows_mean"] = round(delta.get("rows", 0.0) / steps, 2)
        account["lm_decode_ms_per_step"] = round(1e3 * delta.get("decode", 0.0) / steps, 2)
    return account


def codec_latency(before: dict, after: dict) -> dict:
    """Mean codec-call latency per lane between two `codec_totals` readings."""
    means = {}
    for lane, now in after.items():
        then = before.get(lane, {})
        calls = now.get("count", 0.0) - then.get("count", 0.0)
        if calls:
            means[f"codec_ms_mean_{lane}"] = round((now.get("sum", 0.0) - then.get("sum", 0.0)) / calls, 2)
    return means


def measure_server(config: ServeConfig, args: argparse.Namespace):
    """Rows of one server: the sequential level, then each concurrency level."""
    config = replace(config, ports=Ports(*free_ports(3)))  # taken just before the server starts
    log = args.log_dir / f"triton-{config.model}-{config.mode.value}-fc{config.chunking().first_chunk_frames}.log"
    started = time.perf_counter()
    with Server(config, log_path=log) as server:
        base = _base(config) | {"startup_s": round(time.perf_counter() - started, 1)}
        synthesize(server.grpc_url, "Warm up.", seed=0, max_audio_seconds=args.seconds, ignore_eos=True)
        levels = [("sequential", lambda: run_sequential(server.grpc_url, args.sequential, args.seconds))]
        levels += [(n, lambda n=n: run_concurrent(server.grpc_url, n, args.seconds)) for n in args.concurrency]
        time.sleep(LM_FLUSH_WAIT_S)  # the LM lane exports its account from a thread, about once a second
        text = _metrics(server)  # after each level's export, the reading the next level starts from
        for level, run in levels:
            before, lm_before, level_start = codec_totals(text), lm_totals(text), time.perf_counter()
            results = run()
            row = {**base, "level": level, **summary(results, time.perf_counter() - level_start)}
            time.sleep(LM_FLUSH_WAIT_S)
            text = _metrics(server)
            yield row | codec_latency(before, codec_totals(text)) | lm_account(lm_before, lm_totals(text))


def _base(config: ServeConfig) -> dict:
    chunking = config.chunking()
    return {"model": config.model, "mode": config.mode.value, "first_chunk_frames": chunking.first_chunk_frames,
            "first_chunk_frames_idle": chunking.first_chunk_frames_idle, "device": config.device}


def _metrics(server: Server) -> str:
    return urllib.request.urlopen(server.metrics_url, timeout=5).read().decode()


def server_configs(args: argparse.Namespace) -> list[ServeConfig]:
    return [ServeConfig(model=model, device=args.device, mode=mode, first_chunk_frames=first,
                        first_chunk_frames_idle=idle)
            for model in args.models for mode in args.modes for first in args.first_chunk_frames
            for idle in args.first_chunk_frames_idle]


def _idle(value: str) -> int | None:
    return None if value == "default" else int(value)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    defaults = ServeConfig()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=[defaults.model])
    parser.add_argument("--device", choices=("cpu", "cuda"), default=defaults.device)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=[defaults.mode.value])
    parser.add_argument("--first-chunk-frames", type=int, nargs="+", default=[defaults.first_chunk_frames],
                        help="serve each model and mode once per first-chunk size (default: the model's plan)")
    parser.add_argument("--first-chunk-frames-idle", type=_idle, nargs="+", default=[None],
                        help="a lone request's first chunk, per server: N, 0 (off) or default (the server's)")
    parser.add_argument("--seconds", type=float, default=1.6, help="audio per request")
    parser.add_argument("--sequential", type=int, default=5, help="requests one at a time, on an idle server")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8], help="streams at once, per level")
    parser.add_argument("--log-dir", type=Path, default=Path("."))
    parser.add_argument("--out", type=Path, default=None)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    failed = False
    with open(args.out, "w") if args.out else contextlib.nullcontext() as out:
        for config in server_configs(args):
            try:
                for row in measure_server(config, args):
                    _emit(row, out)
            except (RuntimeError, TimeoutError) as exc:  # a server that fails to start or stream: report, go on
                _emit(_base(config) | {"error": str(exc)}, out)
                failed = True
    return 1 if failed else 0


def _emit(row: dict, out) -> None:
    """Print a row and write it at once: a timeout keeps the rows measured so far."""
    print(json.dumps(row), flush=True)
    if out:
        out.write(json.dumps(row) + "\n")
        out.flush()


if __name__ == "__main__":
    sys.exit(main())
