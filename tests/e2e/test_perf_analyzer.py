"""NVIDIA's perf_analyzer replays a bench plan against `vox_ensemble` over gRPC streaming, and its export
reads back as bench records: one response per chunk, then Triton's empty final response."""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from clients.bench.config import smoke_config
from clients.bench.loadgen import plan_run
from clients.bench.workload import load_workload

FRAME_RATE_HZ = 12.5  # Qwen3-TTS 12 Hz codec frames
SAMPLE_RATE = 24000
RATE, DURATION_S = 2.0, 2.0


def _voxlane(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "server.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def exported(url, tmp_path_factory):
    """The smoke plan at one rate, exported, replayed by perf_analyzer through the exported commands."""
    out = tmp_path_factory.mktemp("perf_analyzer")
    done = _voxlane("bench", "--smoke", "--url", url, "--rates", str(RATE), "--duration", str(DURATION_S),
                    "--export-perf-analyzer", str(out))
    assert done.returncode == 0, done.stderr
    _voxlane("say", "Warm up.", "--url", url, "-o", str(out / "warm.wav"), "--max-audio-seconds", "0.5")
    replay = subprocess.run(["sh", str(out / "commands.sh")], capture_output=True, text=True, timeout=120)
    assert replay.returncode == 0, replay.stdout[-3000:] + replay.stderr[-3000:]
    return out, out / f"r{RATE:g}-s0.profile.json"


def _plan(url):
    utterances, _ = load_workload(None)
    return plan_run(replace(smoke_config(url, out=None), duration_s=DURATION_S), utterances, RATE, 0)


def test_perf_analyzer_runs_from_the_install():
    done = _voxlane("perf-analyzer", "--version", timeout=30)
    assert done.returncode == 0 and "2.51" in done.stdout + done.stderr


def test_the_export_has_one_response_per_chunk_and_then_the_final_one(exported, url):
    _, profile = exported
    [experiment] = json.loads(profile.read_text())["experiments"]
    requests = sorted(experiment["requests"], key=lambda r: r["timestamp"])
    plan = _plan(url)
    assert [int(r["request_inputs"]["seed"]) for r in requests] == [p.seed for p in plan]  # the plan, in order
    for request, planned in zip(requests, plan):
        chunks = request["response_outputs"][:-1]
        assert len(request["response_timestamps"]) == len(chunks) + 1
        assert [c["chunk_index"] for c in chunks] == list(range(len(chunks)))
        frames = round(planned.audio_s * FRAME_RATE_HZ)
        assert sum(len(c["audio"]) for c in chunks) == frames * SAMPLE_RATE / FRAME_RATE_HZ
        assert {c["lane"] for c in chunks} <= {"urgent", "background"}


def test_the_export_reads_back_as_ttfa_chunk_gaps_and_stalls(exported, url):
    out, profile = exported
    done = _voxlane("bench", "--from-perf-analyzer", str(profile), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "TTFA p50/p90/p99" in done.stdout
    [summary] = json.loads((out / "perf_analyzer_summary.json").read_text())["summaries"]
    plan = _plan(url)
    assert summary["num_requests"] == summary["num_completed"] == len(plan)
    assert summary["num_errors"] == 0
    assert summary["ttfa_ms"]["p50"] is not None and summary["chunk_gap_ms"]["p50"] is not None
    # every response but each stream's final one is a chunk
    [experiment] = json.loads(profile.read_text())["experiments"]
    assert summary["num_chunks"] == sum(len(r["response_timestamps"]) - 1 for r in experiment["requests"])
    assert 0.0 <= summary["stall_rate"] <= 1.0
