"""The lanes under load: urgent share by reason, each codec lane's queueing and run time, and the
chunks' slack when sent, against request rate (each summary's `lanes` block, clients/bench/lanes.py)."""
from __future__ import annotations

from pathlib import Path

from clients.bench.plot import _label, _nan, plt, save_figure

LANE_STYLES = {"urgent": "-", "background": "--"}
SHARE_STYLES = {"total": "-", "first_chunk": "--", "low_slack": ":"}
SLACK_STYLES = {"p10": ":", "p50": "-", "p90": "--"}


def has_lanes(results: list[dict]) -> bool:
    """Whether any rate of any result carries a lanes block (a server that was scraped)."""
    return any(s.get("lanes") for result in results for s in result["summaries"])


def lanes_path(path: Path) -> Path:
    """Where the lanes figure goes beside the main one: bench.png → bench_lanes.png."""
    path = Path(path)
    return path.with_name(f"{path.stem}_lanes{path.suffix or '.png'}")


def plot_lanes(results: list[dict], path: Path) -> Path:
    """One PNG, four panels: urgent share, queue (mean ms) and run (mean ms) per lane, slack quantiles."""
    fig, axes = plt.subplots(1, 4, figsize=(4.2 * 4, 3.4))
    for index, result in enumerate(results):
        color = f"C{index}"
        rated = [(s["rate"], s["lanes"]) for s in result["summaries"] if s.get("lanes")]
        rates = [rate for rate, _ in rated]
        label = _label(result)
        for key, style in SHARE_STYLES.items():
            values = [b["urgent_share_total"] if key == "total" else b["urgent_share"][key] for _, b in rated]
            axes[0].plot(rates, [_nan(v) for v in values], style, color=color, marker="o", label=f"{label} {key}")
        for ax, kind in ((axes[1], "queue_ms"), (axes[2], "run_ms")):
            for lane, style in LANE_STYLES.items():
                ax.plot(rates, [_nan(b[kind][lane]["mean"]) for _, b in rated], style, color=color, marker="o",
                        label=f"{label} {lane}")
        for key, style in SLACK_STYLES.items():
            axes[3].plot(rates, [_nan(b["slack_ms"][key]) for _, b in rated], style, color=color, marker="o",
                         label=f"{label} {key}")
    titles = ("share of chunks routed urgent", "codec queueing, mean (ms)", "codec run, mean (ms)",
              "chunk slack when sent (ms)")
    for ax, title in zip(axes, titles):
        ax.set_xlabel("request rate (req/s)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[0].set_ylim(-0.02, 1.02)
    axes[3].axhline(0.0, color="grey", linestyle="--", linewidth=0.8)  # below: a stall
    return save_figure(fig, path)
