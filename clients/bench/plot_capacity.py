"""Capacity figures: capacity at 90 % and 99 % attainment per configuration (bars, with each seed's
capacity as a dot), from results.json files (`capacity`, `capacity_per_seed`)."""
from __future__ import annotations

from pathlib import Path

from clients.bench.plot import _label, plt, save_figure
from clients.bench.summary import ATTAINMENT_TARGETS


def plot_capacity(results: list[dict], path: Path) -> Path:
    """One bar per result and target; a seed's capacity that is only a lower bound is drawn hollow."""
    fig, ax = plt.subplots(figsize=(1.6 + 1.3 * len(results), 3.6))
    width = 0.38
    for offset, target in zip((-width / 2, width / 2), ATTAINMENT_TARGETS):
        key = f"{target:.2f}"
        xs = [i + offset for i in range(len(results))]
        ax.bar(xs, [r["capacity"][key]["rate"] or 0.0 for r in results], width, label=f"{target:.0%} attainment")
        for x, result in zip(xs, results):
            seeds = (result.get("capacity_per_seed") or {}).get(key) or {}
            for rate, bound in zip(seeds.get("rates", []), seeds.get("lower_bound", [])):
                ax.plot(x, rate, "o", color="black", markersize=3.5, fillstyle="none" if bound else "full")
    ax.set_xticks(range(len(results)), [_label(r) for r in results], rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("capacity (req/s)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path)
