"""Markdown tables of LM profiles: `server.microbench.lm --profile --json FILE` runs side by side.

    python3 -m server.microbench.profile_report OUT/lm_compiled.json OUT/lm_plain.json [--top-batch 1]

One row per run and batch size: frame time, kernels per frame (a whole decode step; its predictor and
talker halves and what runs outside the two graphs), the step's GPU time per kernel class, the floor at
the measured context; then each graph's replay time against its kernels' busy time; then each half's
longest kernels at one batch size.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from server.microbench.kernel_classes import KernelClass


def _ms(value: float | None, digits: int = 2) -> str:
    return "-" if value is None or value != value else f"{value:.{digits}f}"  # None, NaN: not measured


def _markdown(header: list[str], lines: list[list[str]]) -> str:
    return "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
                     + ["| " + " | ".join(cells) + " |" for cells in lines])


def _mode(row: dict) -> str:
    """compiled or uncompiled; `, fused` where the code predictor ran its one-kernel attention."""
    if row.get("fused_frame"):
        return "fused frame" + (", fp8" if row.get("fp8_weights") else "")
    return ("compiled" if row.get("compiled", True) else "uncompiled") + (", fused" if row.get("fused_predictor") else "")


def _kernel_cells(profile: dict | None) -> list[str]:
    if not profile:
        return ["-"] * (3 + len(KernelClass))
    step, classes = profile["step"], profile["step"]["classes"]
    split = f"{profile['predictor']['count']} + {profile['talker']['count']} + {profile['outside_graphs']}"
    return [str(step["count"]), split, _ms(step["busy_ms"])] + [
        f"{_ms(classes[cls.value]['ms'])} ({classes[cls.value]['count']})" for cls in KernelClass]


def frame_table(rows: list[dict]) -> str:
    header = ["mode", "batch", "frame (graphs) ms", "predictor / talker replay ms", "kernels per frame",
              "predictor + talker + outside", "GPU busy ms", *(f"{cls.value} ms (n)" for cls in KernelClass),
              "context", "floor ms (predictor per step / once)", "frame / floor"]
    return _markdown(header, [[
        _mode(row), str(row["batch"]), _ms(row["graphs_ms"]), f"{_ms(row['predictor_ms'])} / {_ms(row['talker_ms'])}",
        *_kernel_cells(row.get("profile")), str(row["context"]),
        f"{_ms(row['frame_floor_ms'], 3)} / {_ms(row['frame_floor_cached_ms'], 3)}",
        _ms(row["graphs_ms"] / row["frame_floor_ms"])] for row in rows])


def halves_table(rows: list[dict]) -> str:
    """Each graph's replay against its kernels' busy time: what the GPU spends between kernels."""
    header = ["mode", "batch", "half", "kernels", "replay ms", "busy ms", "between kernels ms", "µs per kernel",
              "longest class"]
    return _markdown(header, [_half_cells(row, half) for row in rows if row.get("profile")
                              for half in ("predictor", "talker")])


def _half_cells(row: dict, half: str) -> list[str]:
    summary, replay_ms = row["profile"][half], row[f"{half}_ms"]
    longest, total = max(summary["classes"].items(), key=lambda item: item[1]["ms"])
    return [_mode(row), str(row["batch"]), half, str(summary["count"]), _ms(replay_ms), _ms(summary["busy_ms"]),
            _ms(replay_ms - summary["busy_ms"]), _ms(replay_ms * 1e3 / max(summary["count"], 1), 1),
            f"{longest} {_ms(total['ms'])} ms"]


def top_tables(rows: list[dict], batch: int) -> str:
    """Each half's longest kernels at `batch`, per run."""
    parts = []
    for row in rows:
        profile = row.get("profile")
        if row["batch"] != batch or not profile:
            continue
        for half in ("predictor", "talker"):
            title = (f"{_mode(row)}, batch {batch}, {half} ({profile['source']}): "
                     f"{profile[half]['count']} kernels, {_ms(profile[half]['busy_ms'])} ms busy")
            parts.append(title + "\n" + _markdown(["ms", "kernels", "class", "name"], [
                [_ms(ms, 3), str(count), cls, f"`{name[:120]}`"] for name, count, ms, cls in profile[half]["top"]]))
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path, help="--json files of server.microbench.lm")
    parser.add_argument("--top-batch", type=int, default=1, help="list each half's longest kernels at this batch")
    args = parser.parse_args(argv)
    rows = [row for path in args.files if path.exists() for row in json.loads(path.read_text())]
    print(frame_table(rows))
    print()
    print(halves_table(rows))
    print()
    print(top_tables(rows, args.top_batch))


if __name__ == "__main__":
    main()
