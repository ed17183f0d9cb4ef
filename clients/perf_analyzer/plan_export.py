"""A `voxlane bench` plan as perf_analyzer input: `--input-data` JSON, a `--request-intervals` file, a command.

perf_analyzer sends the input data's steps in order, one per request, and waits `intervals[i]` before
request i (microseconds, the first measured from the start), so both files keep the plan's order. With
`--request-count` equal to the plan's length it sends the plan once instead of looping it, and it skips the
stability trials that make random schedules fail. Its worker threads each take the next step when they
send, so two arrivals a millisecond apart can swap inputs; one worker thread (`--max-threads 1`, which still
keeps many requests in flight) keeps step i on request i. Optional inputs the plan does not set are left out:
random data for them would break the server's range checks.
"""
from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from clients.bench.config import BenchConfig
from clients.bench.loadgen import PlannedRequest, plan_run, request_tensors
from protocol.models import ROUTER as MODEL
from clients.bench.workload import load_workload

COMMANDS_FILE = "commands.sh"
MIN_INTERVAL_US = 1  # perf_analyzer needs positive intervals; two arrivals in one microsecond are one apart


@dataclass(frozen=True)
class ExportedRun:
    """The files of one (rate, seed) run and the perf_analyzer command that replays it."""

    name: str
    input_data: Path
    intervals: Path
    profile: Path  # where the command asks perf_analyzer to write its --profile-export-file
    num_requests: int

    def command(self, url: str) -> list[str]:
        return [str(Path(sys.executable).parent / "voxlane"), "perf-analyzer", "-m", MODEL, "-u", url, "-i", "grpc", "--streaming",
                "--input-data", str(self.input_data), "--request-intervals", str(self.intervals),
                "--request-count", str(self.num_requests), "--max-threads", "1",
                "--profile-export-file", str(self.profile)]


def input_data(config: BenchConfig, plan: list[PlannedRequest]) -> dict:
    """perf_analyzer's `--input-data` document: one stream whose steps are the plan's requests in order."""
    return {"data": [{name: _json_values(array) for name, array in request_tensors(config, p).items()}
                     for p in plan]}


def request_intervals_us(plan: list[PlannedRequest]) -> list[int]:
    """Microseconds before each request: the first from the start of the run, the rest from the one before."""
    times = [p.scheduled_s for p in plan]
    gaps = [times[0]] + [b - a for a, b in zip(times, times[1:])]
    return [max(MIN_INTERVAL_US, round(g * 1e6)) for g in gaps]


def export_plans(config: BenchConfig, out: Path) -> list[ExportedRun]:
    """Write every (rate, seed) run of `config` under `out` with a `commands.sh` that replays them all."""
    utterances, _ = load_workload(config.workload)
    out.mkdir(parents=True, exist_ok=True)
    runs = [_export_run(config, plan_run(config, utterances, rate, seed), f"r{rate:g}-s{seed}", out)
            for rate in config.rates for seed in config.seeds]
    lines = ["#!/bin/sh", "# perf_analyzer refuses an existing --profile-export-file: move old ones away first",
             "set -e"] + [shlex.join(run.command(config.url)) for run in runs]
    (out / COMMANDS_FILE).write_text("\n".join(lines) + "\n")
    return runs


def _export_run(config: BenchConfig, plan: list[PlannedRequest], name: str, out: Path) -> ExportedRun:
    if not plan:
        raise ValueError(f"run {name} has no requests: raise --duration or the rate")
    run = ExportedRun(name, out / f"{name}.input.json", out / f"{name}.intervals.txt",
                      out / f"{name}.profile.json", len(plan))
    run.input_data.write_text(json.dumps(input_data(config, plan)))
    run.intervals.write_text("\n".join(str(us) for us in request_intervals_us(plan)) + "\n")
    return run


def _json_values(array: np.ndarray) -> list:
    if array.dtype == np.object_:
        return [v.decode() if isinstance(v, bytes) else str(v) for v in array]
    return array.tolist()
