"""`voxlane bench --export-perf-analyzer DIR` and `--from-perf-analyzer EXPORT.json`."""
from __future__ import annotations

import json
import shlex
from pathlib import Path

from clients.bench.config import BenchConfig
from clients.bench.records import Slo
from clients.perf_analyzer.plan_export import COMMANDS_FILE, export_plans
from clients.perf_analyzer.profile import format_profile_summary, read_export, summarize

SUMMARY_FILE = "perf_analyzer_summary.json"


def cross_check(config: BenchConfig, export_dir: Path | None, profiles: list[Path] | None, log=print) -> int:
    """Export the plan, or summarise perf_analyzer's exports (or both), as the flags ask."""
    if export_dir:
        runs = export_plans(config, export_dir)
        for run in runs:
            log(f"{run.name}: {run.num_requests} requests -> {shlex.join(run.command(config.url))}")
        log(f"wrote {len(runs)} runs under {export_dir} (all commands: {export_dir / COMMANDS_FILE})")
    if profiles:
        slo = Slo(config.ttfa_slo_ms / 1e3)
        summaries = []
        for path in profiles:
            for experiment in read_export(path):
                summary = {"export": str(path), **summarize(experiment, slo)}
                log(f"{path}: {format_profile_summary(summary)}")
                summaries.append(summary)
        config.out.mkdir(parents=True, exist_ok=True)
        (config.out / SUMMARY_FILE).write_text(json.dumps({"slo": {"ttfa_ms": config.ttfa_slo_ms},
                                                           "summaries": summaries}, indent=1))
        log(f"wrote {config.out / SUMMARY_FILE}")
    return 0
