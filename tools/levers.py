"""Routing and lane levers measured side by side on one server, each against the same baseline.

Each variant is the baseline (every lever off) with one setting changed. The server starts once;
between variants only the models whose rendered parameters change are reloaded (the router, a codec
lane: their config.pbtxt is rewritten in the run's repository and Triton's explicit model control
loads it again), so the LM lane, its compiled graphs and its warm caches are the same for every
variant. A variant that would change the LM lane is refused: it needs a server of its own. Per
variant: idle time to first audio, then `voxlane bench` over the rates. Writes one JSON file,
rewritten after every variant.

    python -m tools.levers --device cuda --model qwen3-tts-1.7b --workload WORKLOAD.tsv \\
        --rates 26 30 34 38 --variants baseline urgent-budget margin-q95 mps-priority --out levers.json

A variant is a name below or `FIELD=VALUE[,FIELD=VALUE]` of `ServeConfig` (e.g. `urgent_budget=2`).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import fields, replace
from pathlib import Path

from server.compare import free_ports
from clients.bench.config import BenchConfig
from clients.bench.runner import run_bench
from server.serve import MODES, ROUTER_MODEL, ServeConfig, Server, ServingMode
from server.triton_launch import Ports
from protocol import models
from tools.smoke import run_sequential

# the baseline: every lever off (the background lane's batcher at its defaults), so a variant never inherits
# an earlier variant's setting
OFF = {"codec_mps_priority": 0, "urgent_budget": 0, "margin_quantile": None,
       "codec_max_batch": ServeConfig.codec_max_batch, "codec_queue_delay_us": ServeConfig.codec_queue_delay_us}
VARIANTS = {
    "baseline": {},
    "mps-priority": {"codec_mps_priority": 1},  # the background codec below the LM and the urgent lane
    "urgent-budget": {"urgent_budget": 4},
    "margin-q95": {"margin_quantile": 0.95},
    # the background lane's batch: smaller batches that return sooner, or a longer wait for fuller ones
    "codec-batch-16": {"codec_max_batch": 16},
    "codec-delay-8ms": {"codec_queue_delay_us": 8000},
}
RELOADABLE = (models.CODEC, models.CODEC_URGENT, ROUTER_MODEL)  # in this order: the router last


def overrides(variant: str) -> dict:
    """The ServeConfig fields a variant sets on top of the baseline."""
    if variant in VARIANTS:
        return {**OFF, **VARIANTS[variant]}
    known = {f.name for f in fields(ServeConfig)}
    settings = dict(item.split("=", 1) for item in variant.split(","))
    if not settings or set(settings) - known:
        raise ValueError(f"variant {variant!r}: not one of {sorted(VARIANTS)} nor FIELD=VALUE of ServeConfig")
    return {**OFF, **{key: _value(text) for key, text in settings.items()}}


def _value(text: str):
    if text.lower() == "none":
        return None
    for parse in (int, float):
        try:
            return parse(text)
        except ValueError:
            continue
    return text


def models_to_reload(old: ServeConfig, new: ServeConfig) -> list[str]:
    """The models whose rendered parameters differ; refuses a change of the LM lane's own settings."""
    if old.lane_settings(models.LM) != new.lane_settings(models.LM) or old.engine_config().max_slots != new.engine_config().max_slots:
        raise ValueError("this variant changes the LM lane: measure it on a server of its own")
    return [name for name in RELOADABLE
            if old.parameters(name) != new.parameters(name) or old.batching(name) != new.batching(name)]


def reload(server: Server, config: ServeConfig, names: list[str]) -> float:
    """Rewrite the named models' config.pbtxt with `config`'s settings and load them again; seconds taken."""
    import tritonclient.grpc as grpcclient
    started = time.perf_counter()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    for name in names:
        path = server.run_dir / "model_repository" / name / "config.pbtxt"
        path.write_text(config.render_config(name, path.read_text()))
        client.load_model(name)
        if not client.is_model_ready(name):
            raise RuntimeError(f"{name} is not ready after its reload")
    return round(time.perf_counter() - started, 1)


def rate_row(summary: dict) -> dict:
    """The numbers the lever table reports for one rate."""
    lanes, server_time = summary.get("lanes") or {}, summary.get("server_time") or {}
    return {"rate": summary["rate"], "slo_attainment": summary["slo_attainment"], "ttfa_ms": summary["ttfa_ms"],
            "stall_rate": summary["stall_rate"], "completed_rps": summary["completed_rps"],
            "urgent_share": lanes.get("urgent_share"), "routed": lanes.get("routed"),
            "queue_ms": lanes.get("queue_ms"), "run_ms": lanes.get("run_ms"),
            "lm_busy_share": server_time.get("busy_share")}


def measure_variant(server: Server, args: argparse.Namespace, name: str, out: Path) -> dict:
    idle = [r.ttfa_s * 1e3 for r in run_sequential(server.grpc_url, args.sequential, 1.6)]
    bench = replace(BenchConfig(), url=server.grpc_url, rates=tuple(args.rates), duration_s=args.duration,
                    workload=args.workload, max_audio_seconds=args.max_audio_seconds,
                    metrics_url=server.metrics_url, out=out)
    result = run_bench(bench)
    return {"idle_ttfa_ms_p50": round(statistics.median(idle), 1), "capacity": result["capacity"],
            "rates": [rate_row(s) for s in result["summaries"]]}


def measure(args: argparse.Namespace) -> dict:
    base = ServeConfig(model=args.model, device=args.device, mode=ServingMode(args.mode),
                       ports=Ports(*free_ports(3)), **overrides(args.variants[0]))
    report: dict = {"model": args.model, "mode": args.mode, "rates": args.rates, "variants": []}
    started = time.perf_counter()
    with Server(base, log_path=args.log) as server:
        report["startup_s"] = round(time.perf_counter() - started, 1)
        run_sequential(server.grpc_url, 2, 1.6)  # warm-up
        current = base
        for index, name in enumerate(args.variants):
            config = replace(base, **overrides(name))
            names = models_to_reload(current, config)
            entry = {"variant": name, "overrides": VARIANTS.get(name, overrides(name)), "reloaded": names,
                     "reload_s": reload(server, config, names)}
            current = config
            entry.update(measure_variant(server, args, name, args.bench_out / f"{index}-{name}"))
            report["variants"].append(entry)
            _write(args.out, report)
            print(json.dumps({k: entry[k] for k in ("variant", "reload_s", "idle_ttfa_ms_p50", "capacity")}), flush=True)
    return report


def _write(path: Path | None, report: dict) -> None:
    if path is not None:
        path.write_text(json.dumps(report, indent=1))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen3-tts-1.7b")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    parser.add_argument("--mode", choices=MODES, default="voxlane")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS))
    parser.add_argument("--rates", type=float, nargs="+", default=[26, 30, 34, 38])
    parser.add_argument("--duration", type=float, default=8.0, help="seconds of arrivals per rate")
    parser.add_argument("--sequential", type=int, default=4, help="idle requests one at a time per variant")
    parser.add_argument("--workload", type=Path, default=None)
    parser.add_argument("--max-audio-seconds", type=float, default=6.0)
    parser.add_argument("--log", type=Path, default=Path("tritonserver-levers.log"))
    parser.add_argument("--bench-out", type=Path, default=Path("bench-levers"))
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    for name in args.variants:
        overrides(name)  # a bad variant fails here, before the server starts
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    print(json.dumps(measure(args), indent=1))


if __name__ == "__main__":
    main()
