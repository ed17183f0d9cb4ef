"""A bench plan as perf_analyzer input, and perf_analyzer's profile export read back as bench records."""
from __future__ import annotations

import json

import pytest

from clients.bench.config import BenchConfig
from clients.bench.loadgen import PlannedRequest
from clients.bench.records import Slo
from clients.bench.workload import Utterance
from clients.perf_analyzer.plan_export import export_plans, input_data, request_intervals_us
from clients.perf_analyzer.profile import chunk_gaps_s, read_export, request_record, summarize

SAMPLE_RATE = 24000
MS = 1_000_000  # nanoseconds


def _plan(times):
    return [PlannedRequest(f"r{i}", Utterance(f"u{i}", 1.0, f"text {i}"), t, 0.8, 100 + i)
            for i, t in enumerate(times)]


def test_input_data_holds_each_planned_request_in_order_with_only_the_inputs_the_bench_sends():
    data = input_data(BenchConfig(voice="tiny"), _plan([0.1, 0.4]))
    assert data["data"] == [
        {"text": ["text 0"], "seed": [100], "max_audio_seconds": [pytest.approx(0.8)], "ignore_eos": [True],
         "voice": ["tiny"]},
        {"text": ["text 1"], "seed": [101], "max_audio_seconds": [pytest.approx(0.8)], "ignore_eos": [True],
         "voice": ["tiny"]}]


def test_intervals_are_microseconds_before_each_request_the_first_from_the_start():
    assert request_intervals_us(_plan([0.25, 0.5, 0.5, 1.75])) == [250_000, 250_000, 1, 1_250_000]


def test_export_writes_every_rate_and_seed_with_a_command_that_sends_the_plan_once(tmp_path):
    config = BenchConfig(url="h:1", rates=(2.0, 4.0), duration_s=3.0, num_seeds=2)
    runs = export_plans(config, tmp_path)
    assert [r.name for r in runs] == ["r2-s0", "r2-s1", "r4-s0", "r4-s1"]
    for run in runs:
        steps = json.loads(run.input_data.read_text())["data"]
        intervals = run.intervals.read_text().split()
        assert len(steps) == len(intervals) == run.num_requests > 0
        command = run.command(config.url)
        assert command[command.index("--request-count") + 1] == str(run.num_requests)
        assert "--streaming" in command and str(run.profile) in command
    assert (tmp_path / "commands.sh").read_text().count("perf-analyzer") == 4


def _response(index, num_samples, lane="urgent"):
    return {"audio": [0.0] * num_samples, "sample_rate": SAMPLE_RATE, "chunk_index": index, "lane": lane}


# what perf_analyzer writes for Triton's empty final response: bytes left in its buffer
GARBAGE = {"audio": -3.19e37, "sample_rate": 67109008, "chunk_index": -104841215, "lane": ""}


def _request(sent_ms, arrivals_ms, samples, final_ms):
    outputs = [_response(i, n) for i, n in enumerate(samples)] + [GARBAGE]
    return {"timestamp": sent_ms * MS, "request_inputs": {"text": "hi", "max_audio_seconds": "0.8"},
            "response_timestamps": [a * MS for a in arrivals_ms] + [final_ms * MS], "response_outputs": outputs}


def test_a_request_reads_as_its_chunks_without_the_final_response():
    record = request_record("r", _request(100, [160, 300], [3840, 7680], 301), t0=0)
    assert record.sent_s == pytest.approx(0.1) and record.done_s == pytest.approx(0.301)
    assert [c.index for c in record.chunks] == [0, 1]
    assert [c.duration_s for c in record.chunks] == [pytest.approx(0.16), pytest.approx(0.32)]
    assert record.first_audio_s - record.sent_s == pytest.approx(0.06)
    assert record.error is None


def test_a_response_out_of_order_is_an_error_not_a_chunk():
    data = _request(0, [50, 90], [3840, 3840], 91)
    data["response_outputs"][1]["chunk_index"] = 5
    assert request_record("r", data, 0).error == "response 1 is not chunk 1"


def test_the_summary_has_ttfa_chunk_gaps_and_stalls_of_the_export(tmp_path):
    # request A: TTFA 60 ms, chunk 1 arrives 40 ms after chunk 0's 160 ms ended (a stall);
    # request B: TTFA 40 ms, chunk 1 arrives while chunk 0 plays
    export = {"experiments": [{"experiment": {"mode": "request_rate", "value": 2},
                               "window_boundaries": [0, 2000 * MS],
                               "requests": [_request(500, [540, 600], [3840, 3840], 601),
                                            _request(0, [60, 260], [3840, 3840], 261)]}]}
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(export))
    [experiment] = read_export(path)
    assert [r.sent_s for r in experiment.run.records] == [0.0, 0.5]  # send order
    assert chunk_gaps_s(experiment.run.records) == [pytest.approx(0.2), pytest.approx(0.06)]
    summary = summarize(experiment, Slo(0.2))
    assert summary["ttfa_ms"]["p50"] == pytest.approx(50.0)
    assert summary["num_stalled"] == 1 and summary["stalled_requests"] == ["pa-00000"]
    assert summary["num_chunks"] == 4 and summary["num_errors"] == 0
    assert summary["final_response_ms"]["p50"] == pytest.approx(181.0)
    assert summary["rate"] == pytest.approx(4.0)  # 2 requests sent within 0.5 s
