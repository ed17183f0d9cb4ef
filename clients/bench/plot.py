"""Figure-5 style plots: SLO attainment, p99 TTFA and goodput against request rate, one line per mode."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

PANELS = (("SLO attainment", lambda s: s["slo_attainment"]),
          ("p99 TTFA (ms)", lambda s: s["ttfa_ms"]["p99"]),
          ("goodput (req/s meeting SLO)", lambda s: s["goodput_rps"]))
# each panel's value in one seed's row (summary["per_seed"]): the band spans the seeds' min to max
SEED_VALUES = (lambda row: row["slo_attainment"], lambda row: row["ttfa_ms"]["p99"], lambda row: row["goodput_rps"])


def save_figure(fig, path: Path) -> Path:
    """Lay the figure out, write it as a PNG (its folder made if missing) and free it -> the path written."""
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_results(results: list[dict], path: Path) -> Path:
    """One PNG with three panels; each results.json is one line, labelled by the server's mode."""
    fig, axes = plt.subplots(1, len(PANELS), figsize=(4.2 * len(PANELS), 3.4))
    for index, result in enumerate(results):
        label = _label(result)
        rates = [s["rate"] for s in result["summaries"]]
        for ax, (_, value), seed_value in zip(axes, PANELS, SEED_VALUES):
            ax.plot(rates, [_nan(value(s)) for s in result["summaries"]], marker="o", label=label, color=f"C{index}")
            band = seed_band(result["summaries"], seed_value)
            if band is not None:
                ax.fill_between(rates, *band, color=f"C{index}", alpha=0.2, linewidth=0)
    for ax, (title, _) in zip(axes, PANELS):
        ax.set_xlabel("request rate (req/s)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    _mark_slo(axes, results[0] if results else None)
    axes[0].legend()
    return save_figure(fig, path)


def seed_band(summaries: list[dict], value) -> tuple[list[float], list[float]] | None:
    """(lows, highs) of `value` over each rate's seeds; None unless every rate has two seeds or more."""
    rows = [s.get("per_seed") or [] for s in summaries]
    if not rows or any(len(r) < 2 for r in rows):
        return None
    values = [[_nan(value(row)) for row in r] for r in rows]
    return [min(v) for v in values], [max(v) for v in values]


def _mark_slo(axes, result: dict | None) -> None:
    axes[0].axhline(0.9, color="grey", linestyle="--", linewidth=0.8)
    axes[0].set_ylim(-0.02, 1.02)
    if result is not None:
        axes[1].axhline(result["slo"]["ttfa_ms"], color="grey", linestyle="--", linewidth=0.8)


def _label(result: dict) -> str:
    mode = result.get("server", {}).get("mode") or "?"
    text_rate = result.get("config", {}).get("text_rate")  # absent from results written before --text-rate
    return (result.get("label") or mode) + ("" if text_rate is None else f", text {text_rate:g} tok/s")


def _nan(value):
    return float("nan") if value is None else value
