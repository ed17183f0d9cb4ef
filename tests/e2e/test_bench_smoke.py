"""`voxlane bench --smoke` against the test server: every request accounted for, records and summaries agree."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from clients.bench.config import smoke_config
from clients.bench.loadgen import plan_run
from clients.bench.records import RequestRecord, Slo, evaluate
from clients.bench.seeds import per_seed
from clients.bench.server_info import chunking_of
from clients.bench.summary import RunWindow, capacities, summarize_rate
from clients.bench.text_pace import cut_pieces
from clients.bench.workload import load_workload
from scheduler import ChunkPlan

FRAME_RATE_HZ = 12.5  # Qwen3-TTS 12 Hz codec frames
TEXT_RATE = 50.0  # tokens/s of the streamed-text run
TEXT_RUN = ["--rates", "2", "--duration", "3", "--text-rate", f"{TEXT_RATE:g}"]


@pytest.fixture(scope="module")
def results(server, url, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("bench")
    metrics = f"http://127.0.0.1:{server.config.ports.metrics}/metrics"
    done = subprocess.run([sys.executable, "-m", "server.cli", "bench", "--smoke", "--url", url, "--out", str(out),
                           "--metrics-url", metrics], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "capacity at 90%" in done.stdout
    return json.loads((out / "results.json").read_text())


@pytest.fixture(scope="module")
def text_results(server, url, tmp_path_factory) -> dict:
    """A short `--text-rate` run: each request a streaming-text session, its pieces at TEXT_RATE."""
    out = tmp_path_factory.mktemp("bench-text")
    done = subprocess.run([sys.executable, "-m", "server.cli", "bench", "--smoke", "--url", url, "--out", str(out),
                           *TEXT_RUN], capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    assert f"(text {TEXT_RATE:g} tokens/s)" in done.stdout
    return json.loads((out / "results.json").read_text())


def _records(run: dict) -> list[RequestRecord]:
    return [RequestRecord.from_json(r) for r in run["records"]]


def test_every_planned_request_is_recorded_once(results, url):
    config = smoke_config(url, out=None)
    utterances, _ = load_workload(None)
    assert [run["rate"] for run in results["runs"]] == list(config.rates)
    for run in results["runs"]:
        planned = plan_run(config, utterances, run["rate"], run["seed"])
        assert [r.request_id for r in _records(run)] == [p.request_id for p in planned]
        assert [r.requested_audio_s for r in _records(run)] == [p.audio_s for p in planned]


def test_streams_are_complete_in_order_and_as_long_as_requested(results):
    for run in results["runs"]:
        for r in _records(run):
            assert r.error is None, r.error
            assert [c.index for c in r.chunks] == list(range(len(r.chunks)))
            arrivals = [c.arrival_s for c in r.chunks]
            assert r.scheduled_s <= r.sent_s <= arrivals[0] and arrivals == sorted(arrivals) and arrivals[-1] <= r.done_s
            expected = round(r.requested_audio_s * FRAME_RATE_HZ) / FRAME_RATE_HZ
            assert r.audio_s == pytest.approx(expected, abs=1e-6)


def test_summaries_agree_with_the_records(results):
    slo = Slo(results["slo"]["ttfa_ms"] / 1e3)
    for summary in results["summaries"]:
        runs = [run for run in results["runs"] if run["rate"] == summary["rate"]]
        windows = [RunWindow(tuple(_records(run)), run["window_s"], run["wall_s"]) for run in runs]
        recomputed = summarize_rate(summary["rate"], windows, slo)
        server_side = ("client_overhead", "server_time", "lanes", "per_seed")
        assert {k: v for k, v in summary.items() if k not in server_side} == recomputed
        # each seed's own row is that seed's runs summarised alone
        assert summary["per_seed"] == per_seed(summary["rate"], windows, [run["seed"] for run in runs], slo)


def test_each_rate_records_where_the_lm_spent_its_time(results):
    for summary in results["summaries"]:
        block = summary["server_time"]
        assert block["seconds"]["decode"] > 0 and block["num_steps"] > 0
        assert sum(block["share"].values()) == pytest.approx(1.0, abs=1e-3)
        assert 1 <= block["mean_step_batch"] <= 32
        assert summary["num_requests"] == summary["num_completed"] > 0
        assert summary["client_overhead"]["num_responses"] >= summary["num_requests"]
    assert results["capacity"] == capacities(results["summaries"])


def test_server_mode_and_settings_come_from_the_server(results):
    assert results["server"]["mode"] == "voxlane"
    assert results["server"]["speechlm_lm"]["model"] == "qwen3-tts-tiny"
    assert results["config"]["max_audio_seconds"] == 1.2


def test_plot_writes_a_png(results, tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(results))
    done = subprocess.run([sys.executable, "-m", "server.cli", "plot", str(path), str(path), "-o",
                           str(tmp_path / "fig.png")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "fig.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "fig_lanes.png").read_bytes()[:4] == b"\x89PNG"  # the lanes under load


def test_each_rate_records_its_lanes_under_load(results):
    """Every chunk the rate's runs received is counted once by its routing reason; chunk 0 of each
    request is urgent as the first chunk, so that share is requests over chunks."""
    for summary in results["summaries"]:
        runs = [run for run in results["runs"] if run["rate"] == summary["rate"]]
        records = [r for run in runs for r in _records(run)]
        num_chunks = sum(len(r.chunks) for r in records)
        block = summary["lanes"]
        assert block["num_chunks"] == num_chunks
        assert block["routed"]["urgent"]["first_chunk"] == len(records)
        assert block["urgent_share"]["first_chunk"] == pytest.approx(len(records) / num_chunks, abs=1e-4)
        assert block["slack_ms"]["count"] == num_chunks - len(records)
        for lane in ("urgent", "background"):
            assert block["run_ms"][lane]["count"] == block["queue_ms"][lane]["count"]
        assert block["run_ms"]["urgent"]["count"] >= len(records) and block["run_ms"]["urgent"]["mean"] > 0


def test_streamed_text_requests_complete_with_all_their_audio(text_results, url):
    assert text_results["config"]["text_rate"] == TEXT_RATE and text_results["slo"]["excuses_late_text"]
    [run] = text_results["runs"]
    planned = plan_run(smoke_config(url, out=None), load_workload(None)[0], run["rate"], run["seed"])
    records = _records(run)
    assert [r.request_id for r in records] == [p.request_id for p in planned] and records
    for r, p in zip(records, planned):
        assert r.error is None, r.error
        assert [c.index for c in r.chunks] == list(range(len(r.chunks)))
        assert r.audio_s == pytest.approx(round(r.requested_audio_s * FRAME_RATE_HZ) / FRAME_RATE_HZ, abs=1e-6)
        # the pieces went out in order, none before its time; then the close, unless the audio was over
        # first (the tiny model's small BPE makes several tokens of a word: it may need only part of the text)
        num_pieces = len(cut_pieces(p.utterance.text))
        assert 2 <= len(r.piece_sent_s) <= num_pieces
        for k, t in enumerate(r.piece_sent_s):
            assert k / TEXT_RATE - 1e-3 <= t - r.sent_s < k / TEXT_RATE + 0.5
        if len(r.piece_sent_s) == num_pieces and r.text_closed_s is not None:
            assert r.text_closed_s >= r.piece_sent_s[-1]
        else:
            assert r.text_closed_s is None and r.chunks[-1].arrival_s < r.sent_s + len(r.piece_sent_s) / TEXT_RATE + 0.1
        # TTFA counts from the first piece: the server prefills once its first word is final, i.e. after piece 1
        assert r.first_audio_s > r.piece_sent_s[1] and evaluate(r, Slo()).ttfa_s == r.first_audio_s - r.sent_s


def test_streamed_text_chunks_are_the_frames_the_bench_reads_from_the_server(text_results):
    """The chunk sizes read from the server's LM parameters (which say which text a chunk needs) are
    those of the audio received: every chunk but the last holds exactly its planned frames."""
    plan = ChunkPlan(chunking_of(text_results["server"]))
    for r in _records(text_results["runs"][0]):
        for c in r.chunks[:-1]:
            assert c.duration_s * FRAME_RATE_HZ == pytest.approx(plan.end(c.index) - plan.start(c.index))


def test_streamed_text_summary_splits_stalls_and_recomputes(text_results):
    [summary] = text_results["summaries"]
    [run] = text_results["runs"]
    records = _records(run)
    slo = Slo(text_results["slo"]["ttfa_ms"] / 1e3, chunking_of(text_results["server"]))
    outcomes = [evaluate(r, slo) for r in records]
    assert summary["ttfa_ms"]["p50"] is not None and summary["server_ttfa_ms"]["p50"] is not None
    assert summary["text_stalls"]["num_chunks"] == sum(o.num_text_stalls for o in outcomes)
    assert summary["server_stalls"]["num_chunks"] == sum(o.num_server_stalls for o in outcomes)
    assert (summary["text_stalls"]["num_chunks"] + summary["server_stalls"]["num_chunks"]
            == sum(o.num_stalls for o in outcomes))
    windows = [RunWindow(tuple(records), run["window_s"], run["wall_s"])]
    server_side = ("client_overhead", "server_time", "lanes", "per_seed")
    assert {k: v for k, v in summary.items() if k not in server_side} == summarize_rate(summary["rate"], windows, slo)


def test_text_report_puts_whole_and_streamed_text_side_by_side(results, text_results, tmp_path):
    """tools/device_text_rate.sh's table, from this module's two runs (and a run that is missing)."""
    for name, result in (("whole", results), ("text50", text_results)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(result))
    done = subprocess.run([sys.executable, "-m", "clients.bench.text_report", str(tmp_path / "text50"),
                           str(tmp_path / "whole"), str(tmp_path / "text10"), "--json", str(tmp_path / "t.json")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "text10 (skipped)" in done.stderr
    written = json.loads((tmp_path / "t.json").read_text())
    assert [row["text_rate"] for row in written["capacity"]] == [None, TEXT_RATE]
    whole_rates = [s["rate"] for s in results["summaries"]]
    assert [(row["text_rate"], row["rate"]) for row in written["rows"]] == (
        [(None, rate) for rate in whole_rates] + [(TEXT_RATE, 2.0)])
    [summary] = text_results["summaries"]
    [row] = [row for row in written["rows"] if row["text_rate"] == TEXT_RATE]
    assert row["text_stall_rate"] == summary["text_stalls"]["stall_rate"]
    assert row["ttfa_ms"] == f"{summary['ttfa_ms']['p50']} / {summary['ttfa_ms']['p99']}"
    assert f"| {TEXT_RATE:g} tok/s | 2 | {summary['num_requests']} |" in done.stdout
    assert sum(line.startswith("| whole |") for line in done.stdout.splitlines()) == 1 + len(whole_rates)
