"""Markdown tables of `voxlane microbench` rows (the JSON lines its workers print)."""
from __future__ import annotations


def format_tables(rows: list[dict]) -> str:
    return "\n\n".join(part for part in (lm_table(rows), codec_table(rows), overlap_table(rows)) if part)


def _table(header: tuple[str, ...], lines: list[tuple]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(_cell(v) for v in line) + " |" for line in lines]
    return "\n".join(out)


def _cell(value) -> str:
    if isinstance(value, float):
        return "-" if value != value else f"{value:.2f}"  # NaN: not measured
    return str(value)


def lm_table(rows: list[dict]) -> str:
    lm = [r for r in rows if r["bench"] == "lm"]
    if not lm:
        return ""
    lines = [(r["mps_pct"], r["batch"], r["graphs_ms"], r["eager_ms"], r["talker_ms"], r["predictor_ms"],
              r["floor_ms"], r["talker_ms"] / r["floor_ms"]) for r in lm]
    return "LM frame (ms)\n" + _table(("MPS %", "batch", "frame (graphs)", "frame (eager)", "talker", "predictor",
                                       "talker floor", "talker / floor"), lines)


def codec_table(rows: list[dict]) -> str:
    codec = [r for r in rows if r["bench"] == "codec"]
    if not codec:
        return ""
    lines = [(r["mps_pct"], r["batch"], r["eager_ms"], r["graphs_ms"], r["host_copy_ms"]) for r in codec]
    return (f"Codec call, {codec[0]['frames']} new frames + {codec[0]['context']} context per window (ms)\n"
            + _table(("MPS %", "batch", "eager", "graphs", "host copies"), lines))


def overlap_table(rows: list[dict]) -> str:
    overlap = [r for r in rows if r["bench"] == "overlap"]
    if not overlap:
        return ""
    lines = []
    for row in overlap:
        if row["role"] == "timeshare":
            lines.append(("time sharing (one process, 100 %)", row["lm_frames_per_s"], row["codec_frames_per_s"],
                          "serialised"))
    splits = sorted({r["split"] for r in overlap if "split" in r})
    for split in splits:
        pair = {r["role"]: r for r in overlap if r.get("split") == split}
        lm = pair.get("lm", {}).get("lm_frames_per_s", float("nan"))
        codec = pair.get("codec", {}).get("codec_frames_per_s", float("nan"))
        lines.append((f"MPS split LM:codec {split}", lm, codec, "yes" if codec >= lm else "no"))
    first = overlap[0]
    return (f"Side by side: LM at batch {first['lm_batch']}, codec at batch {first['codec_batch']} "
            f"x {first['chunk_frames']} frames (audio frames per second)\n"
            + _table(("configuration", "LM frames/s", "codec frames/s", "codec keeps up"), lines))
