"""Past-capacity figure (the paper's Figure 11): completed req/s, SLO attainment and stall rate
against the offered rate, one line per configuration, from results.json files of fixed rates."""
from __future__ import annotations

from pathlib import Path

from clients.bench.plot import _label, _nan, plt, save_figure, seed_band

PANELS = (("completed req/s (dashed: goodput)", lambda s: s.get("completed_rps")),
          ("SLO attainment", lambda s: s["slo_attainment"]),
          ("stall rate", lambda s: s.get("stall_rate")))


def plot_past(results: list[dict], path: Path) -> Path:
    """One PNG with three panels; each configuration's seeds as a band where a rate has two or more."""
    fig, axes = plt.subplots(1, len(PANELS), figsize=(4.2 * len(PANELS), 3.4))
    for index, result in enumerate(results):
        color, rates = f"C{index}", [s["rate"] for s in result["summaries"]]
        for ax, (_, value) in zip(axes, PANELS):
            ax.plot(rates, [_nan(value(s)) for s in result["summaries"]], marker="o", color=color,
                    label=_label(result))
            band = seed_band(result["summaries"], value)
            if band is not None:
                ax.fill_between(rates, *band, color=color, alpha=0.2, linewidth=0)
        axes[0].plot(rates, [_nan(s.get("goodput_rps")) for s in result["summaries"]], linestyle="--", color=color)
    for ax, (title, _) in zip(axes, PANELS):
        ax.set_xlabel("offered rate (req/s)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[1].set_ylim(-0.02, 1.02)
    axes[2].set_ylim(bottom=-0.01)
    axes[0].legend(fontsize=8)
    return save_figure(fig, path)
