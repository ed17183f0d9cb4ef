"""Per-rate summaries of judged requests, and capacity: the highest rate that still meets the SLO."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from clients.bench.records import RequestRecord, Slo, evaluate

ATTAINMENT_TARGETS = (0.90, 0.99)


@dataclass(frozen=True)
class RunWindow:
    """One run's requests with its arrival window and wall time (arrivals plus drain)."""

    records: tuple[RequestRecord, ...]
    window_s: float
    wall_s: float


def summarize_rate(rate: float, runs: list[RunWindow], slo: Slo) -> dict:
    """Pooled over the runs (seeds) of one rate; a request without a first chunk has no TTFA."""
    records = [r for run in runs for r in run.records]
    outcomes = [evaluate(r, slo) for r in records]
    ttfas = [o.ttfa_s for o in outcomes if o.ttfa_s is not None]
    with_audio = [o for o in outcomes if o.ttfa_s is not None]
    window = sum(run.window_s for run in runs)
    num_met = sum(o.meets_slo for o in outcomes)
    num_completed = sum(o.is_complete for o in outcomes)
    stalled = [o for o in with_audio if o.num_stalls]
    return {
        "rate": rate, "num_runs": len(runs), "num_requests": len(records),
        "offered_rps": _ratio(len(records), window),
        "num_completed": num_completed, "num_errors": sum(r.error is not None for r in records),
        "ttfa_ms": _percentiles_ms(ttfas),
        "server_ttfa_ms": _percentiles_ms([o.server_ttfa_s for o in with_audio]),
        "num_stalled": len(stalled), "stall_rate": _ratio(len(stalled), len(with_audio)),
        "stall_s_total": round(sum(o.stall_s for o in outcomes), 4),
        "text_stalls": _stall_counts([o.num_text_stalls for o in with_audio]),
        "server_stalls": _stall_counts([o.num_server_stalls for o in with_audio]),
        "num_slo_met": num_met, "slo_attainment": _ratio(num_met, len(records)),
        "goodput_rps": _ratio(num_met, window),
        "completed_rps": _ratio(num_completed, sum(run.wall_s for run in runs)),
        "audio_s_per_s": _ratio(sum(r.audio_s for r in records), sum(run.wall_s for run in runs)),
        "algorithmic_latency_ms": _percentiles_ms([s for o in with_audio for s in o.algorithmic_latency_s]),
    }


def capacity(points: list[tuple[float, float]], target: float) -> dict:
    """The highest rate with attainment >= target, interpolated towards the next measured rate above it.

    `points` are (rate, attainment). The answer lies in `bracket`: the highest measured rate that met the
    target and the next one, which did not; between them attainment is taken as linear in the rate.
    `is_lower_bound` says the highest measured rate met the target (the capacity is at least that).
    """
    ordered = sorted((rate, att) for rate, att in points if att is not None)
    meeting = [i for i, (_, att) in enumerate(ordered) if att >= target]
    if not meeting:
        first = ordered[0][0] if ordered else None
        return {"target": target, "rate": 0.0 if ordered else None, "bracket": [0.0, first] if ordered else None,
                "is_lower_bound": False}
    k = meeting[-1]
    if k == len(ordered) - 1:
        return {"target": target, "rate": ordered[k][0], "bracket": [ordered[k][0], None], "is_lower_bound": True}
    (lo, att_lo), (hi, att_hi) = ordered[k], ordered[k + 1]
    rate = lo + (hi - lo) * (att_lo - target) / (att_lo - att_hi)
    return {"target": target, "rate": round(rate, 4), "bracket": [lo, hi], "is_lower_bound": False}


def next_search_rate(points: list[tuple[float, float]], target: float) -> float:
    """The next rate of a bisection for the capacity at `target`: the bracket's midpoint, else double or halve."""
    found = capacity(points, target)
    lo, hi = found["bracket"]
    if found["is_lower_bound"]:
        return 2 * lo
    return (lo + hi) / 2 if lo > 0 else hi / 2


def capacities(summaries: list[dict]) -> dict:
    points = [(s["rate"], s["slo_attainment"]) for s in summaries]
    return {f"{t:.2f}": capacity(points, t) for t in ATTAINMENT_TARGETS}


def _stall_counts(per_request: list[int]) -> dict:
    """Late chunks of one cause, over requests that got audio: chunks, requests with one, their share."""
    num_stalled = sum(n > 0 for n in per_request)
    return {"num_chunks": sum(per_request), "num_stalled": num_stalled,
            "stall_rate": _ratio(num_stalled, len(per_request))}


def _percentiles_ms(values_s: list[float]) -> dict:
    return {f"p{q}": _percentile_ms(values_s, q) for q in (50, 90, 95, 99)}


def _percentile_ms(values_s: list[float], q: float) -> float | None:
    return round(float(np.percentile(values_s, q)) * 1e3, 2) if values_s else None


def _ratio(num: float, den: float) -> float | None:
    return round(num / den, 4) if den else None
