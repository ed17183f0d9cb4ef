"""The paper's figures on one GPU: every serving configuration started at once, then measured one at a time.

All servers start together under one MPS daemon (their compiles and graph captures overlap, so the
start-up is paid about once), then each job benches one server while the others sit idle (an idle
lane holds memory, not SMs). A job is `SERVER:ARRIVAL:RATES:SEEDS:WIDTH:MAX`:

- SERVER: a name in SERVERS (a mode, an admission policy, an SM split), optionally `NAME@MODEL` to serve
  another model than `--model` (a family's figures beside another's, servers started together), and
  `+KEY=VALUE` overrides of its chunk plan (OVERRIDES: `voxlane+first=1+chunk=25+la=2@higgs-v3-4b`);
- ARRIVAL: poisson, or gamma (burstiness 0.5);
- RATES: the first rates, `/`-separated; `@F` is F times the 90 % capacity of the server's first job
  (its Poisson one, say), so a later job starts near what an earlier one found;
- SEEDS: seeds per rate; WIDTH: more rates until both capacities are bracketed within WIDTH req/s
  (0: only RATES); MAX: the most rates of the job.

Per server: start-up seconds and idle time to first audio (p50 of `--sequential` requests). Per job:
`<state>/<label>/results.json` (rewritten after every rate) and a line in `<state>/report.json`.

    python -m tools.figures --state figs --workload W.tsv --jobs voxlane:poisson:36:3:2:5 \\
        partition:poisson:34:3:2:5 voxlane:gamma:@0.85:3:2:4
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

from server.compare import free_ports
from clients.bench.config import BenchConfig
from clients.bench.runner import run_bench
from server.mps import MpsDaemon
from server.serve import ServeConfig, Server, ServingMode
from server.triton_launch import Ports
from tools.smoke import run_sequential

SERVERS = {  # name -> ServeConfig fields over the defaults (voxlane, 60/40, deadline-aware)
    "timeshare": {"mode": ServingMode.TIMESHARE},
    "colocate": {"mode": ServingMode.COLOCATE},
    "partition": {"mode": ServingMode.PARTITION},
    "voxlane": {},
    "voxlane-pf": {"admission": "prefill-first"},
    "voxlane-c15": {"codec_sm_pct": 15, "lm_sm_pct": 85},
    "voxlane-c25": {"codec_sm_pct": 25, "lm_sm_pct": 75},
    "voxlane-nosplit": {"codec_sm_pct": 100, "lm_sm_pct": 100},
    # the lever "first chunk from load": 1 frame for a request that starts alone, 4 beside 20 running streams
    "voxlane-fcl": {"first_chunk_frames_idle": 1, "first_chunk_frames_busy": 4, "busy_streams": 20},
    # the flow-matching codecs' DiT blocks compiled before their graphs are captured (`--codec-compile`)
    "voxlane-cc": {"codec_compile": True},
    "voxlane-nocc": {"codec_compile": False},
}
BURSTINESS = {"poisson": 1.0, "gamma": 0.5}
# `+KEY=VALUE` in a server's name -> the ServeConfig field it sets and its parser (a chunk-plan sweep's servers)
OVERRIDES = {"first": ("first_chunk_frames", int), "chunk": ("chunk_frames", int),
             "growth": ("chunk_growth", lambda text: None if text == "none" else float(text)),
             "la": ("codec_lookahead_frames", int), "idle": ("first_chunk_frames_idle", int),
             "fp": ("fused_predictor", lambda text: text not in ("0", "false", "off")),
             "ff": ("fused_frame", lambda text: text not in ("0", "false", "off")),
             "fp8": ("fp8_weights", lambda text: text not in ("0", "false", "off"))}


def server_fields(config_name: str) -> dict:
    """The ServeConfig fields of a server's name: its SERVERS entry, then its `+KEY=VALUE` overrides."""
    base, *overrides = config_name.split("+")
    if base not in SERVERS:
        raise ValueError(f"server {base!r}: one of {sorted(SERVERS)}")
    fields = dict(SERVERS[base])
    for item in overrides:
        key, _, value = item.partition("=")
        if key not in OVERRIDES:
            raise ValueError(f"server override {item!r}: KEY one of {sorted(OVERRIDES)}")
        name, parse = OVERRIDES[key]
        fields[name] = parse(value)
    return fields


@dataclass(frozen=True)
class Job:
    server: str
    arrival: str
    rates: tuple[str, ...]  # numbers, or @F: F × the server's first 90 % capacity
    seeds: int
    width: float
    max_rates: int

    @property
    def label(self) -> str:
        """`SERVER-ARRIVAL`; `-past` for a job of fixed rates (WIDTH 0), absolute or `@F`, so that it
        does not share its results directory with the server's bracket job."""
        return f"{self.server.replace('@', '_')}-{self.arrival}" + ("-past" if self.width == 0 else "")

    @property
    def config_name(self) -> str:
        """The SERVERS entry of its server."""
        return self.server.partition("@")[0]

    @property
    def model(self) -> str | None:
        """The model its server serves, where the job names one (`NAME@MODEL`); None: `--model`."""
        return self.server.partition("@")[2] or None


def parse_job(spec: str) -> Job:
    """`SERVER:ARRIVAL:RATES:SEEDS:WIDTH:MAX` (see the module's docstring)."""
    parts = spec.split(":")
    if len(parts) != 6:
        raise ValueError(f"job {spec!r}: want SERVER:ARRIVAL:RATES:SEEDS:WIDTH:MAX")
    server, arrival, rates, seeds, width, max_rates = parts
    if arrival not in BURSTINESS:
        raise ValueError(f"job {spec!r}: arrival one of {sorted(BURSTINESS)}")
    server_fields(server.partition("@")[0])  # a bad name or override fails here, before any server starts
    job = Job(server, arrival, tuple(rates.split("/")), int(seeds), float(width), int(max_rates))
    for rate in job.rates:
        float(rate.removeprefix("@"))  # a bad number fails here, before any server starts
    return job


def resolve_rates(job: Job, first_capacity: float | None) -> tuple[float, ...]:
    """The job's first rates in req/s; an `@F` rate needs the server's first 90 % capacity."""
    rates = []
    for text in job.rates:
        if not text.startswith("@"):
            rates.append(float(text))
        elif first_capacity:
            rates.append(round(float(text[1:]) * first_capacity / 2) * 2 or 1.0)  # on a 2 req/s grid
        else:
            raise ValueError(f"{job.label}: {text} needs an earlier job of {job.server} with a capacity")
    return tuple(dict.fromkeys(rates))


def start_servers(names: list[str], args: argparse.Namespace, mps: MpsDaemon | None, report: dict) -> dict:
    """Start every named server at once; returns the ones that came up, records each start-up."""
    ports = free_ports(3 * len(names))
    servers, threads = {}, []
    logs = args.state / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    for index, name in enumerate(names):
        config_name, _, model = name.partition("@")
        config = ServeConfig(model=model or args.model, device=args.device, kv_cache_gb=args.kv_cache_gb,
                             ports=Ports(*ports[3 * index:3 * index + 3]), **server_fields(config_name))
        server = Server(config, log_path=logs / f"{name.replace('@', '_')}.log", shared_mps=mps)
        threads.append(threading.Thread(target=_start, args=(name, server, servers, report), daemon=True))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return servers


def _start(name: str, server: Server, servers: dict, report: dict) -> None:
    started = time.perf_counter()
    try:
        server.start(timeout_s=900)
        servers[name] = server
        report["servers"][name] = {"startup_s": round(time.perf_counter() - started, 1)}
    except Exception as exc:  # one server that fails to start leaves the others to measure
        report["servers"][name] = {"failed": str(exc)[:500]}


def idle_ttfa(server: Server, count: int) -> dict[str, float]:
    """p50, p99 (nearest rank) and max of `count` requests one at a time, after two of warm-up."""
    run_sequential(server.grpc_url, 2, 1.6)  # warm-up
    times = sorted(r.ttfa_s * 1e3 for r in run_sequential(server.grpc_url, count, 1.6))
    p99 = times[min(len(times) - 1, math.ceil(0.99 * len(times)) - 1)]
    return {"idle_ttfa_ms_p50": round(statistics.median(times), 1), "idle_ttfa_ms_p99": round(p99, 1),
            "idle_ttfa_ms_max": round(times[-1], 1)}


def run_job(job: Job, server: Server, args: argparse.Namespace, report: dict) -> dict:
    first = report["servers"][job.server].get("first_capacity_90")
    bench = replace(BenchConfig(), url=server.grpc_url, metrics_url=server.metrics_url,
                    rates=resolve_rates(job, first), duration_s=args.duration, num_seeds=job.seeds,
                    arrival=job.arrival, burstiness=BURSTINESS[job.arrival], workload=args.workload,
                    max_audio_seconds=args.max_audio_seconds, ttfa_slo_ms=args.ttfa_slo_ms,
                    bracket_width=job.width, max_rates=job.max_rates,
                    out=args.state / job.label)
    result = run_bench(bench, extra={"label": job.label})
    capacity = result["capacity"]
    report["servers"][job.server].setdefault("first_capacity_90", capacity["0.90"]["rate"])
    return {"label": job.label, "capacity": capacity, "capacity_per_seed": result["capacity_per_seed"],
            "rates": [s["rate"] for s in result["summaries"]]}


def measure(args: argparse.Namespace) -> dict:
    jobs = [parse_job(spec) for spec in args.jobs]
    names = list(dict.fromkeys(job.server for job in jobs))
    report: dict = {"servers": {}, "jobs": [], "duration_s": args.duration}
    started = time.perf_counter()
    mps = MpsDaemon(args.state / "mps") if args.device == "cuda" else None
    if mps is not None:
        mps.start()
    try:
        servers = start_servers(names, args, mps, report)
        report["startup_wall_s"] = round(time.perf_counter() - started, 1)
        _write(args.state, report)
        for job in jobs:
            if job.server not in servers or time.perf_counter() - started > args.stop_after_s:
                continue
            entry = report["servers"][job.server]
            if "idle_ttfa_ms_p50" not in entry:
                entry.update(idle_ttfa(servers[job.server], args.sequential))
            try:
                report["jobs"].append(run_job(job, servers[job.server], args, report))
            except Exception as exc:  # a job that fails (a lane died) leaves the later ones to run
                report["jobs"].append({"label": job.label, "failed": str(exc)[:500]})
            report["elapsed_s"] = round(time.perf_counter() - started, 1)
            _write(args.state, report)
            print(json.dumps(report["jobs"][-1])[:600], flush=True)
        for server in servers.values():
            server.stop()
    finally:
        if mps is not None:
            mps.stop()
    (args.state / "done").write_text("done\n")
    return report


def _write(state: Path, report: dict) -> None:
    (state / "report.json").write_text(json.dumps(report, indent=1))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", nargs="+", required=True, help="SERVER:ARRIVAL:RATES:SEEDS:WIDTH:MAX")
    parser.add_argument("--state", type=Path, required=True, help="where results and the report go")
    parser.add_argument("--model", default="qwen3-tts-1.7b")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    parser.add_argument("--duration", type=float, default=6.0, help="seconds of arrivals per seed and rate")
    parser.add_argument("--sequential", type=int, default=6, help="idle requests one at a time per server")
    parser.add_argument("--workload", type=Path, default=None)
    parser.add_argument("--max-audio-seconds", type=float, default=6.0)
    parser.add_argument("--stop-after-s", type=float, default=1e9, help="start no job after this many seconds")
    parser.add_argument("--ttfa-slo-ms", type=float, default=BenchConfig.ttfa_slo_ms,
                        help="the SLO's time to first audio (a family whose first frame needs its codebook delays "
                             "and a codec lookahead starts above the default)")
    parser.add_argument("--kv-cache-gb", type=float, default=0.0,
                        help="each server's KV pool (0: the engine's auto share of the GPU, for one server alone)")
    args = parser.parse_args(argv)
    for spec in args.jobs:
        parse_job(spec)
    args.state.mkdir(parents=True, exist_ok=True)
    return args


def main(argv: list[str] | None = None) -> None:
    measure(parse_args(argv))


if __name__ == "__main__":
    main()
