"""Seeds and brackets: each seed's own numbers beside the pooled ones, and the next rate to measure
until every capacity is bracketed tightly enough.

A rate measured with several seeds is summarised pooled (`summary.summarize_rate`); `per_seed` keeps
the numbers each seed gave alone, so a figure can draw a band over the seeds and a capacity can be
given with its spread (`seed_capacities`: the capacity from each seed's attainment curve).
"""
from __future__ import annotations

from clients.bench.records import Slo
from clients.bench.summary import ATTAINMENT_TARGETS, RunWindow, capacity, summarize_rate

SEED_FIELDS = ("slo_attainment", "goodput_rps", "completed_rps", "stall_rate", "num_requests")


def per_seed(rate: float, runs: list[RunWindow], seeds: list[int], slo: Slo) -> list[dict]:
    """One compact summary per seed's run of `rate`: attainment, goodput, throughput, TTFA p50/p99."""
    rows = []
    for seed, run in zip(seeds, runs):
        alone = summarize_rate(rate, [run], slo)
        rows.append({"seed": seed, **{key: alone[key] for key in SEED_FIELDS},
                     "ttfa_ms": {q: alone["ttfa_ms"][q] for q in ("p50", "p99")}})
    return rows


def seed_capacities(summaries: list[dict]) -> dict:
    """Per target: the capacity from each seed's points alone, with their min and max.

    Only seeds present at every rate count (a seed missing at one rate would move its own curve)."""
    seeds = _common_seeds(summaries)
    out = {}
    for target in ATTAINMENT_TARGETS:
        caps = [capacity([(s["rate"], _seed_row(s, seed)["slo_attainment"]) for s in summaries], target)
                for seed in seeds]
        rates = [c["rate"] for c in caps if c["rate"] is not None]
        out[f"{target:.2f}"] = {"seeds": seeds, "rates": rates,
                                "lower_bound": [c["is_lower_bound"] for c in caps],
                                "min": min(rates) if rates else None, "max": max(rates) if rates else None}
    return out


def _common_seeds(summaries: list[dict]) -> list[int]:
    sets = [{row["seed"] for row in s.get("per_seed") or ()} for s in summaries]
    return sorted(set.intersection(*sets)) if sets and all(sets) else []


def _seed_row(summary: dict, seed: int) -> dict:
    return next(row for row in summary["per_seed"] if row["seed"] == seed)


def next_bracket_rate(points: list[tuple[float, float]], width: float,
                      targets: tuple[float, ...] = ATTAINMENT_TARGETS) -> float | None:
    """The next rate to measure so that each target's capacity lies between two measured rates at most
    `width` apart; None once every target is bracketed so (or no point is measured yet).

    Rates stay on a grid of `width`: above the highest rate measured it steps up by two widths, below
    the lowest it steps down by two widths (or halves it), inside a wide bracket it takes the midpoint.
    """
    if not points or width <= 0:
        return None
    measured = {rate for rate, _ in points}
    for target in sorted(targets, reverse=True):  # the strict target first: its bracket sits lower
        found = capacity(points, target)
        lo, hi = found["bracket"]
        if found["is_lower_bound"]:
            candidate = lo + 2 * width
        elif lo == 0.0:  # no measured rate meets the target
            candidate = hi - 2 * width if hi - 2 * width > 0 else hi / 2
        elif hi - lo > width + 1e-9:
            candidate = round((lo + hi) / 2 / width) * width  # within width/2 of the middle: inside
        else:
            continue
        candidate = round(candidate, 4)
        if candidate not in measured:
            return candidate
    return None

