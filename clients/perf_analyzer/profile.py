"""perf_analyzer's `--profile-export-file` read as `voxlane bench` records: TTFA, chunk gaps, stalls.

perf_analyzer's printed latency of a decoupled model is request to *final* response; what a listener
waits for is the first chunk, which only the export has: per request its send `timestamp` and every
response's timestamp (nanoseconds, one steady clock) with that response's outputs. The last response of
each stream is Triton's empty final response; its "outputs" are whatever bytes were in perf_analyzer's
buffer, so it is skipped and never read.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from clients.bench.records import Chunk, RequestRecord, Slo, evaluate
from clients.bench.summary import RunWindow, summarize_rate

NS = 1e-9


@dataclass(frozen=True)
class Experiment:
    """One experiment of an export (one request rate or concurrency) as bench records."""

    mode: str  # perf_analyzer's load mode: request_rate or concurrency
    value: float
    run: RunWindow


def read_export(path: Path) -> list[Experiment]:
    """Every experiment of a profile export, its requests in send order."""
    document = json.loads(Path(path).read_text())
    return [_experiment(e) for e in document["experiments"]]


def _experiment(data: dict) -> Experiment:
    requests = sorted(data["requests"], key=lambda r: r["timestamp"])
    boundaries = data.get("window_boundaries") or []
    t0 = boundaries[0] if boundaries else (requests[0]["timestamp"] if requests else 0)
    records = tuple(request_record(f"pa-{i:05d}", r, t0) for i, r in enumerate(requests))
    # the schedule starts at the window's start, so the arrivals span up to the last send (perf_analyzer's
    # own `value` for --request-intervals is a rounded mean rate)
    window = max((r.sent_s for r in records), default=0.0)
    wall = max((r.done_s for r in records if r.done_s is not None), default=window)
    experiment = data["experiment"]
    return Experiment(experiment["mode"], float(experiment["value"]), RunWindow(records, window, wall))


def request_record(request_id: str, data: dict, t0: int) -> RequestRecord:
    """One exported request; a response before the final one that is not the next chunk is an error."""
    stamps = data["response_timestamps"]
    outputs = data.get("response_outputs") or []
    chunks, error = [], None
    if not stamps or len(outputs) < len(stamps) - 1:
        error = "no response" if not stamps else "the export lacks some responses' outputs"
        stamps = stamps if stamps else []
    for i, (stamp, output) in enumerate(zip(stamps[:-1], outputs)):
        chunk = _chunk(output, (stamp - t0) * NS)
        if chunk is None or chunk.index != i:
            error = f"response {i} is not chunk {i}"
            break
        chunks.append(chunk)
    inputs = data.get("request_inputs") or {}
    sent = (data["timestamp"] - t0) * NS
    return RequestRecord(request_id, str(inputs.get("text", ""))[:40], sent, sent,
                         float(inputs.get("max_audio_seconds", 0.0)), tuple(chunks),
                         (stamps[-1] - t0) * NS if stamps else None, error)


def _chunk(output: dict, arrival_s: float) -> Chunk | None:
    audio, rate, index = output.get("audio"), output.get("sample_rate"), output.get("chunk_index")
    if not isinstance(audio, list) or not isinstance(rate, int) or not isinstance(index, int) or rate <= 0:
        return None
    return Chunk(index, arrival_s, len(audio) / rate, str(output.get("lane", "")))


def chunk_gaps_s(records: tuple[RequestRecord, ...]) -> list[float]:
    """Seconds between consecutive chunks of each stream."""
    return [b.arrival_s - a.arrival_s for r in records for a, b in zip(r.chunks, r.chunks[1:])]


def summarize(experiment: Experiment, slo: Slo) -> dict:
    """`voxlane bench`'s per-rate summary of one experiment, with chunk gaps and the final-response latency."""
    records = experiment.run.records
    window = experiment.run.window_s
    rate = round(len(records) / window, 4) if window > 0 else experiment.value
    summary = summarize_rate(rate, [experiment.run], slo)
    gaps = chunk_gaps_s(records)
    finals = [r.done_s - r.sent_s for r in records if r.done_s is not None]
    summary.update({
        "perf_analyzer": {"mode": experiment.mode, "value": experiment.value},
        "chunk_gap_ms": _percentiles_ms(gaps),
        "final_response_ms": _percentiles_ms(finals),  # what perf_analyzer prints as "latency"
        "num_chunks": sum(len(r.chunks) for r in records),
        "stalled_requests": [r.request_id for r in records if evaluate(r, slo).num_stalls],
    })
    return summary


def format_profile_summary(s: dict) -> str:
    ttfa, gaps, finals = s["ttfa_ms"], s["chunk_gap_ms"], s["final_response_ms"]
    return (f"{s['rate']:g} req/s ({s['perf_analyzer']['mode']} {s['perf_analyzer']['value']:g}): "
            f"{s['num_requests']} req, "
            f"{s['num_errors']} err, {s['num_chunks']} chunks, TTFA p50/p90/p99 {ttfa['p50']}/{ttfa['p90']}/"
            f"{ttfa['p99']} ms, chunk gap p50/p99 {gaps['p50']}/{gaps['p99']} ms, stall rate {s['stall_rate']}, "
            f"SLO {s['slo_attainment']}, final response p50 {finals['p50']} ms")


def _percentiles_ms(values_s: list[float]) -> dict:
    return {f"p{q}": (round(float(np.percentile(values_s, q)) * 1e3, 2) if values_s else None) for q in (50, 90, 99)}
