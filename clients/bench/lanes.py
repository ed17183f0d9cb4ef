"""The codec lanes under load during a run, from the router's Prometheus metrics.

`voxlane_chunks_routed_total{lane, reason}` counts chunks by routed lane and routing reason,
`voxlane_codec_queue_ms{lane}` / `voxlane_codec_run_ms{lane}` split each codec call into queueing
and the lane's own decode run, and `voxlane_chunk_slack_ms` is each chunk's deadline minus its send
time (backend_python/stub_common/metrics.py). The router updates them as chunks go, so one scrape after a
run sees all of it. A rate's `lanes` block is the change between a scrape before its runs and one
after, pooled over its seeds; quantiles come from the histogram buckets as Prometheus's
`histogram_quantile` computes them (linear within a bucket). `voxlane_first_audio_phase_ms{phase}` cuts each
request's server-side TTFA into consecutive phases (scheduler/first_audio.py): a rate's `first_audio_ms`.
"""
from __future__ import annotations

import math
import re

FAMILIES = ("voxlane_chunks_routed_total", "voxlane_codec_queue_ms", "voxlane_codec_run_ms", "voxlane_chunk_slack_ms",
            "voxlane_first_audio_phase_ms")
# the first chunk's path, in order (scheduler/first_audio.py; `lm` stands for the first five without the LM's stamps)
FIRST_AUDIO_PHASES = ("to_lm", "queue", "prefill", "frames", "channel", "lm", "codec", "send")
CODEC_LANES = ("urgent", "background")
URGENT_REASONS = ("first_chunk", "low_slack")
_LINE = re.compile(r'^([a-z_]+)(?:\{([^}]*)\})? ([0-9.e+-]+|[+-]?Inf|NaN)$')
_LABEL = re.compile(r'([a-z_]+)="([^"]*)"')

Labels = tuple[tuple[str, str], ...]  # sorted (name, value) pairs


def parse_lanes(text: str) -> dict[tuple[str, Labels], float]:
    """The lanes' samples of a /metrics text, keyed by (sample name, sorted labels)."""
    samples = {}
    for line in text.splitlines():
        match = _LINE.match(line)
        if match is None or not match.group(1).startswith(FAMILIES):
            continue
        name, labels, value = match.groups()
        samples[(name, tuple(sorted(_LABEL.findall(labels or ""))))] = float(value)
    return samples


def lane_delta(before: dict | None, after: dict | None) -> dict | None:
    """What changed between two scrapes (None when either failed)."""
    if before is None or after is None:
        return None
    return {key: value - before.get(key, 0.0) for key, value in after.items()}


def pool(deltas: list[dict | None]) -> dict | None:
    """Several runs' deltas (the seeds of one rate) summed."""
    deltas = [d for d in deltas if d is not None]
    if not deltas:
        return None
    pooled: dict = {}
    for delta in deltas:
        for key, value in delta.items():
            pooled[key] = pooled.get(key, 0.0) + value
    return pooled


def lanes_block(delta: dict | None) -> dict | None:
    """A rate's `lanes` block: chunks routed per lane and reason, the urgent share per reason, queue and
    run per lane (mean, p50, p90 ms) and the chunks' slack when sent (p10, p50, p90 ms)."""
    if delta is None:
        return None
    routed: dict[str, dict[str, int]] = {}
    for (name, labels), value in delta.items():
        if name == "voxlane_chunks_routed_total" and value:
            label = dict(labels)
            routed.setdefault(label["lane"], {})[label["reason"]] = int(value)
    total = sum(n for reasons in routed.values() for n in reasons.values())
    urgent = routed.get("urgent", {})
    share = {reason: round(urgent.get(reason, 0) / total, 4) if total else None for reason in URGENT_REASONS}
    return {"num_chunks": total, "routed": routed, "urgent_share": share,
            "urgent_share_total": round(sum(urgent.values()) / total, 4) if total else None,
            "queue_ms": {lane: histogram_stats(delta, "voxlane_codec_queue_ms", lane) for lane in CODEC_LANES},
            "run_ms": {lane: histogram_stats(delta, "voxlane_codec_run_ms", lane) for lane in CODEC_LANES},
            "slack_ms": histogram_stats(delta, "voxlane_chunk_slack_ms", None, quantiles=(0.1, 0.5, 0.9)),
            "first_audio_ms": first_audio_block(delta)}


def first_audio_block(delta: dict) -> dict:
    """The first chunk's phases that some request went through, in path order: count, mean, p50, p90 ms."""
    stats = {phase: histogram_stats(delta, "voxlane_first_audio_phase_ms", phase, label="phase")
             for phase in FIRST_AUDIO_PHASES}
    return {phase: value for phase, value in stats.items() if value["count"]}


def histogram_stats(delta: dict, family: str, lane: str | None, quantiles=(0.5, 0.9), label: str = "lane") -> dict:
    """count, mean and quantiles (`p50`…) of one histogram series (`lane` None: no `label` label)."""
    lane_labels = () if lane is None else ((label, lane),)
    count = delta.get((f"{family}_count", lane_labels), 0.0)
    total = delta.get((f"{family}_sum", lane_labels), 0.0)
    buckets = sorted((_bound(dict(labels)["le"]), value) for (name, labels), value in delta.items()
                     if name == f"{family}_bucket" and tuple(l for l in labels if l[0] != "le") == lane_labels)
    stats = {"count": int(count), "mean": round(total / count, 2) if count else None}
    for q in quantiles:
        stats[f"p{round(q * 100)}"] = _round(bucket_quantile(q, buckets))
    return stats


def bucket_quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """Prometheus's histogram_quantile over cumulative (upper bound, count) pairs, sorted by bound:
    linear within the bucket that holds the rank; the first bucket starts at 0 when its bound is
    positive (else the quantile is that bound); a rank in +Inf gives the largest finite bound."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower_bound, lower_count = None, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return lower_bound
            if lower_bound is None:
                if bound <= 0:
                    return bound
                lower_bound = 0.0
            if count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = bound, count
    return lower_bound


def _bound(le: str) -> float:
    return math.inf if le in ("+Inf", "Inf") else float(le)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)
