"""Prometheus metrics on Triton's metrics port, and the lane mix of a long utterance."""
from __future__ import annotations

import re
import urllib.request

import pytest

from clients.stream import synthesize
from tests.e2e.test_streaming import TEXT
from tests.waiting import wait_for


def scrape(server) -> dict[str, float]:
    url = f"http://127.0.0.1:{server.config.ports.metrics}/metrics"
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    values = {}
    for line in text.splitlines():
        match = re.match(r"^(voxlane_[a-z_]+(?:\{[^}]*\})?) ([0-9.e+-]+)$", line)
        if match:
            values[match.group(1)] = float(match.group(2))
    return values


def no_live_requests(server) -> bool:
    """Whether the streams of the tests before (the server is the session's) have ended: a stream ends a step or
    two after its client goes, and a test that counts live streams starts from none."""
    return wait_for(lambda: scrape(server)["voxlane_live_requests"] == 0, timeout_s=30)


def test_long_utterance_uses_both_codec_lanes_and_metrics_count_them(server, url):
    before = scrape(server)
    result = synthesize(url, TEXT, seed=17, max_audio_seconds=8.0, ignore_eos=True)
    after = scrape(server)
    lanes = [c.lane for c in result.chunks]
    assert lanes[0] == "urgent" and "background" in lanes  # the LM runs ahead of playback on CPU
    for lane in ("urgent", "background"):
        key = f'voxlane_chunks_total{{lane="{lane}"}}'
        assert after[key] - before.get(key, 0.0) == lanes.count(lane)
        codec_key = f'voxlane_codec_ms_count{{lane="{lane}"}}'
        assert after[codec_key] - before.get(codec_key, 0.0) == lanes.count(lane)
    assert after["voxlane_ttfa_ms_count"] - before.get("voxlane_ttfa_ms_count", 0.0) == 1
    assert_lane_metrics_count(before, after, lanes)
    assert after["voxlane_live_requests"] == 0
    assert after["voxlane_lm_batch_size"] == 0  # the running batch is empty again
    assert "voxlane_stalls_total" in after


def test_a_requests_first_audio_phases_add_up_to_its_ttfa(server, url):
    """Every phase of the first chunk's path observed once for one request, the LM's stamps among them (not the
    fallback `lm`), and their sums add up to the TTFA histogram's."""
    from scheduler import FIRST_AUDIO_PHASES
    assert no_live_requests(server)  # the histograms' deltas are this request's alone
    before = scrape(server)
    synthesize(url, "Where does the first audio's time go?", seed=3, max_audio_seconds=1.0, ignore_eos=True)
    after = scrape(server)

    def delta(key: str) -> float:
        return after.get(key, 0.0) - before.get(key, 0.0)

    assert delta("voxlane_ttfa_ms_count") == 1
    for phase in FIRST_AUDIO_PHASES:
        assert delta(f'voxlane_first_audio_phase_ms_count{{phase="{phase}"}}') == 1, phase
    assert delta('voxlane_first_audio_phase_ms_count{phase="lm"}') == 0
    total = sum(delta(f'voxlane_first_audio_phase_ms_sum{{phase="{phase}"}}') for phase in FIRST_AUDIO_PHASES)
    assert total == pytest.approx(delta("voxlane_ttfa_ms_sum"), abs=0.01)
    assert delta('voxlane_first_audio_phase_ms_sum{phase="prefill"}') > 0  # a prompt's prefill takes time


def test_lm_phase_counters_cover_its_time_and_count_its_steps(server, url):
    import time

    time.sleep(1.2)  # one export period: the counters hold everything up to now
    before = scrape(server)
    started = time.monotonic()
    result = synthesize(url, TEXT, seed=3, max_audio_seconds=2.0, ignore_eos=True)
    time.sleep(1.2)
    after = scrape(server)
    elapsed = time.monotonic() - started
    phases = {p: after[f"voxlane_lm_{p}_seconds_total"] - before.get(f"voxlane_lm_{p}_seconds_total", 0.0)
              for p in ("prefill", "decode", "host", "idle")}
    assert phases["prefill"] > 0 and phases["decode"] > 0 and phases["idle"] > 0
    # the four phases are the LM thread's whole wall time over the window (export periods jitter)
    assert abs(sum(phases.values()) - elapsed) < 1.5
    steps = after["voxlane_lm_step_batch_count"] - before.get("voxlane_lm_step_batch_count", 0.0)
    assert steps >= round(result.audio_seconds * 12.5)  # a step per frame at least (12.5 frames/s)


def assert_lane_metrics_count(before: dict, after: dict, lanes: list[str]) -> None:
    """Routing reasons, slack and the codec calls' queue/run split account for every chunk of one stream."""
    def delta(key: str) -> float:
        return after[key] - before.get(key, 0.0)

    routed = {(lane, reason): delta(f'voxlane_chunks_routed_total{{lane="{lane}",reason="{reason}"}}')
              for lane, reason in (("urgent", "first_chunk"), ("urgent", "low_slack"), ("background", "slack_ok"))}
    assert routed[("urgent", "first_chunk")] == 1
    assert routed[("urgent", "low_slack")] == lanes.count("urgent") - 1
    assert routed[("background", "slack_ok")] == lanes.count("background")
    assert delta("voxlane_chunk_slack_ms_count") == len(lanes) - 1  # chunk 0 has no deadline before its send
    for lane in ("urgent", "background"):
        for family in ("voxlane_codec_run_ms", "voxlane_codec_queue_ms"):
            assert delta(f'{family}_count{{lane="{lane}"}}') == lanes.count(lane), (family, lane)
        run, call = delta(f'voxlane_codec_run_ms_sum{{lane="{lane}"}}'), delta(f'voxlane_codec_ms_sum{{lane="{lane}"}}')
        assert 0 < run <= call  # the lane's decode is inside the router's call
