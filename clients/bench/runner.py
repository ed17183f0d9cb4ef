"""`voxlane bench` end to end: workload, server settings, a sweep over rates (and a bisection), results.json."""
from __future__ import annotations

import asyncio
import json
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path

from clients.bench.config import BenchConfig
from clients.bench.loadgen import PlannedRequest, RunResult, plan_run, run_load
from clients.bench.records import Slo
from clients.bench.server_info import chunking_of, read_gateway_settings, read_server_settings
from clients.bench.lanes import lane_delta, lanes_block, parse_lanes, pool
from clients.bench.seeds import next_bracket_rate, per_seed, seed_capacities
from clients.bench.server_time import EXPORT_LAG_S, add_server_times, metrics_url_for, parse, scrape_text, server_time
from clients.bench.summary import ATTAINMENT_TARGETS, RunWindow, capacities, next_search_rate, summarize_rate
from clients.bench.workload import Utterance, load_workload

RESULTS_FILE = "results.json"
WARMUP_AUDIO_S = 0.5
WARMUP_TIMEOUT_S = 60.0


class BenchError(RuntimeError):
    """The server could not serve the warm-up request; nothing was measured."""


def run_bench(config: BenchConfig, log=print, extra: dict | None = None) -> dict:
    """Run every rate (then the search and bracket steps), write `results.json` under `config.out`, return
    its content. The file is rewritten after every rate, so a run cut short keeps what it measured;
    `extra` (a label, say) is merged into it."""
    utterances, source = load_workload(config.workload)
    workload = {"source": source, "num_utterances": len(utterances)}
    config.out.mkdir(parents=True, exist_ok=True)

    def save(results: dict) -> None:
        results.update(workload=workload, **(extra or {}))
        (config.out / RESULTS_FILE).write_text(json.dumps(results, indent=1))

    results = asyncio.run(_run_all(config, utterances, log, save))
    save(results)
    return results


async def _run_all(config: BenchConfig, utterances: list[Utterance], log, save=lambda results: None) -> dict:
    read = read_gateway_settings if config.protocol == "openai" else read_server_settings
    server = await read(config.url)
    if config.warmup:
        await _warm_up(config, utterances)
    runs: list[RunResult] = []
    summaries: dict[float, dict] = {}
    client = _client_info()
    slo = Slo(config.ttfa_slo_ms / 1e3, chunking_of(server))

    def results() -> dict:
        ordered = [summaries[r] for r in sorted(summaries)]
        return {"config": config.to_json(), "server": server, "client": client,
                "slo": {"ttfa_ms": config.ttfa_slo_ms, "stalls": 0, "excuses_late_text": config.is_text_stream,
                        "excuses_late_input": config.is_audio_in},
                "summaries": ordered,
                "capacity": capacities(ordered), "capacity_per_seed": seed_capacities(ordered),
                "runs": [_run_json(run) for run in runs]}

    async def measure(rate: float) -> None:
        summaries[rate] = await _run_rate(config, utterances, rate, slo, runs, log)
        save(results())

    for rate in config.rates:
        await measure(rate)
    for _ in range(config.search_steps):
        rate = round(next_search_rate(_points(summaries), ATTAINMENT_TARGETS[0]), 4)
        if rate in summaries:
            break
        await measure(rate)
    while len(summaries) < config.max_rates:
        rate = next_bracket_rate(_points(summaries), config.bracket_width)
        if rate is None or rate in summaries:
            break
        await measure(rate)
    return results()


def _points(summaries: dict[float, dict]) -> list[tuple[float, float]]:
    return [(s["rate"], s["slo_attainment"]) for s in summaries.values()]


async def _run_rate(config: BenchConfig, utterances, rate: float, slo: Slo, runs: list[RunResult], log) -> dict:
    rate_runs, times, lane_deltas = [], [], []
    metrics_url = config.metrics_url or metrics_url_for(config.url)
    for seed in config.seeds:
        plan = plan_run(config, utterances, rate, seed)
        # through a gateway the server's /metrics is not the url's host: only where it was named
        scrapes = config.protocol == "grpc" or config.metrics_url is not None
        before = scrape_text(metrics_url) if scrapes else None
        rate_runs.append(await run_load(config, plan, rate, seed))
        if before is not None:
            await asyncio.sleep(EXPORT_LAG_S)  # the LM's last second of the run reaches /metrics
            after = scrape_text(metrics_url)
            times.append(server_time(parse(before), _parsed(after, parse)))
            lane_deltas.append(lane_delta(parse_lanes(before), _parsed(after, parse_lanes)))
    runs.extend(rate_runs)
    windows = [RunWindow(r.records, r.window_s, r.wall_s) for r in rate_runs]
    summary = summarize_rate(rate, windows, slo)
    summary["per_seed"] = per_seed(rate, windows, [r.seed for r in rate_runs], slo)
    summary["client_overhead"] = _worst_overhead(rate_runs)
    summary["server_time"] = add_server_times(times)
    summary["lanes"] = lanes_block(pool(lane_deltas))
    log(format_summary(summary, config.text_rate, config.audio_in_rate))
    return summary


async def _warm_up(config: BenchConfig, utterances: list[Utterance]) -> None:
    """One short request first, so the first measured request does not pay for lazy start-up."""
    warm = PlannedRequest("warmup", utterances[0], 0.0, WARMUP_AUDIO_S, 0)
    result = await run_load(replace(config, request_timeout_s=WARMUP_TIMEOUT_S), [warm], 0.0, 0)
    if result.records[0].error:
        raise BenchError(f"warm-up request to {config.url} failed: {result.records[0].error}")


def _parsed(text: str | None, parse_text):
    return None if text is None else parse_text(text)


def _worst_overhead(runs: list[RunResult]) -> dict:
    """The run with the largest loop lag speaks for the rate."""
    return max((r.overhead for r in runs), key=lambda o: o["loop_lag_ms"]["p99"] or 0.0)


def _run_json(run: RunResult) -> dict:
    return {"rate": run.rate, "seed": run.seed, "window_s": run.window_s, "wall_s": run.wall_s,
            "overhead": run.overhead, "records": [r.to_json() for r in run.records]}


def _client_info() -> dict:
    return {"python": sys.version.split()[0], "platform": platform.platform(), "started": time.strftime("%FT%T%z")}


def format_summary(s: dict, text_rate: float | None = None, audio_in_rate: float | None = None) -> str:
    ttfa = s["ttfa_ms"]
    lag = s["client_overhead"]["loop_lag_ms"]
    return (f"rate {s['rate']:g}/s{_format_text(text_rate)}{_format_audio_in(audio_in_rate)}: {s['num_requests']} "
            f"req, {s['num_errors']} err, "
            f"TTFA p50/p90/p99 {ttfa['p50']}/{ttfa['p90']}/{ttfa['p99']} ms, stall rate {s['stall_rate']}"
            f"{_format_stall_causes(s, text_rate)}{_format_input_stalls(s, audio_in_rate)}, "
            f"SLO {s['slo_attainment']}, goodput {s['goodput_rps']}/s, completed {s['completed_rps']}/s, "
            f"client loop lag p99 {lag['p99']} ms{_format_server_time(s.get('server_time'))}"
            f"{_format_lanes(s.get('lanes'))}")


def _format_text(text_rate: float | None) -> str:
    return "" if text_rate is None else f" (text {text_rate:g} tokens/s)"


def _format_audio_in(audio_in_rate: float | None) -> str:
    return "" if audio_in_rate is None else f" (audio in at {audio_in_rate:g}x real time)"


def _format_input_stalls(s: dict, audio_in_rate: float | None) -> str:
    if audio_in_rate is None:
        return ""
    latency = s["algorithmic_latency_ms"]
    return (f" (input {s['text_stalls']['stall_rate']}, server {s['server_stalls']['stall_rate']}), "
            f"algorithmic latency p50/p95 {latency['p50']}/{latency['p95']} ms")


def _format_stall_causes(s: dict, text_rate: float | None) -> str:
    if text_rate is None:
        return ""
    ttfa = s["server_ttfa_ms"]
    return (f" (text {s['text_stalls']['stall_rate']}, server {s['server_stalls']['stall_rate']}), "
            f"TTFA after the text p50/p99 {ttfa['p50']}/{ttfa['p99']} ms")


def _format_server_time(block: dict | None) -> str:
    if not block:
        return ""
    shares = ", ".join(f"{phase} {share:.0%}" for phase, share in block["share"].items() if share is not None)
    return f"; LM time: {shares}; mean step batch {block['mean_step_batch']}"


def _format_lanes(block: dict | None) -> str:
    if not block or block["urgent_share_total"] is None:
        return ""
    share = block["urgent_share"]
    phases = ", ".join(f"{phase} {stats['mean']}" for phase, stats in block.get("first_audio_ms", {}).items())
    return (f"; urgent {block['urgent_share_total']:.0%} (first {share['first_chunk']:.0%}, "
            f"low slack {share['low_slack']:.0%}), slack p10 {block['slack_ms']['p10']} ms"
            + (f"; first audio, mean ms: {phases}" if phases else ""))


def load_results(path: Path) -> dict:
    path = Path(path)
    return json.loads((path / RESULTS_FILE if path.is_dir() else path).read_text())
