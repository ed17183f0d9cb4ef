"""Whole-text and streamed-text runs of one server side by side (tools/device_text_rate.sh): capacity per
text rate, and per request rate TTFA from the first piece, TTFA after the text, and stalls by cause.

    python -m clients.bench.text_report OUT/whole OUT/text10 OUT/text30 OUT/text100 --json OUT/text_rate.json

Each argument is a `voxlane bench` results.json (or its directory); one that is missing is reported
and skipped (a run cut short by its time limit).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from clients.bench.runner import RESULTS_FILE, load_results


def report_rows(results: list[dict]) -> list[dict]:
    """One row per (run, request rate), whole text first, then by text rate."""
    rows = []
    for result in sorted(results, key=_text_order):
        for s in result["summaries"]:
            rows.append({"text_rate": result["config"].get("text_rate"), "rate": s["rate"],
                         "num_requests": s["num_requests"], "slo_attainment": s["slo_attainment"],
                         "ttfa_ms": _p50_p99(s["ttfa_ms"]), "server_ttfa_ms": _p50_p99(s["server_ttfa_ms"]),
                         "text_stall_rate": s["text_stalls"]["stall_rate"],
                         "server_stall_rate": s["server_stalls"]["stall_rate"],
                         "completed_rps": s["completed_rps"],
                         "mean_step_batch": (s.get("server_time") or {}).get("mean_step_batch")})
    return rows


def capacity_rows(results: list[dict]) -> list[dict]:
    return [{"text_rate": r["config"].get("text_rate"), "capacity": {target: _capacity(cap) for target, cap
                                                                     in r["capacity"].items()}}
            for r in sorted(results, key=_text_order)]


def format_report(results: list[dict]) -> str:
    """Two markdown tables: capacity per text rate, then the per-rate numbers."""
    lines = ["| text | capacity at 90 % | at 99 % (req/s) |", "| --- | --- | --- |"]
    lines += [f"| {_text(row['text_rate'])} | {row['capacity']['0.90']} | {row['capacity']['0.99']} |"
              for row in capacity_rows(results)]
    lines += ["", "| text | rate (req/s) | requests | SLO attainment | TTFA p50 / p99 (ms) | after the text p50 / p99 "
                  "| stall rate: text / server | completed req/s | mean step batch |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in report_rows(results):
        lines.append(f"| {_text(row['text_rate'])} | {row['rate']:g} | {row['num_requests']} | {row['slo_attainment']} "
                     f"| {row['ttfa_ms']} | {row['server_ttfa_ms']} | {row['text_stall_rate']} / "
                     f"{row['server_stall_rate']} | {row['completed_rps']} | {row['mean_step_batch']} |")
    return "\n".join(lines)


def _text_order(result: dict) -> tuple[bool, float]:
    text_rate = result["config"].get("text_rate")
    return (text_rate is not None, text_rate or 0.0)


def _text(text_rate: float | None) -> str:
    return "whole" if text_rate is None else f"{text_rate:g} tok/s"


def _p50_p99(block: dict) -> str:
    return f"{block['p50']} / {block['p99']}"


def _capacity(cap: dict) -> str:
    if cap["rate"] is None:
        return "-"
    return (">= " if cap["is_lower_bound"] else "") + f"{cap['rate']:g}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", type=Path, help="results.json files or their directories")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args(argv)
    found = [p for p in args.results if (p / RESULTS_FILE if p.is_dir() else p).is_file()]
    for missing in sorted(set(args.results) - set(found)):
        print(f"text_report: no results in {missing} (skipped)", file=sys.stderr)
    results = [load_results(p) for p in found]
    print(format_report(results))
    if args.json:
        args.json.write_text(json.dumps({"capacity": capacity_rows(results), "rows": report_rows(results)}, indent=1))
    return 0 if results else 1


if __name__ == "__main__":
    sys.exit(main())
