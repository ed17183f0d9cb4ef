"""The router's live-stream registry (each stream ends once; no chunk after its end) and the LM watch
(a dead LM, seen by a failing probe, ends the streams that wait on it)."""
from __future__ import annotations

import threading

from backend_python.triton.lane_health import UNHEALTHY
from backend_python.triton.live_streams import LiveStreams
from backend_python.triton.lm_watch import LMWatch


def registry():
    finished: list[tuple[str, str | None]] = []
    return LiveStreams(lambda job, error: finished.append((job, error))), finished


def test_a_stream_ends_once_whoever_ends_it():
    streams, finished = registry()
    streams.add("a", "job-a")
    assert streams.end("a", "the LM died") is True
    assert streams.end("a", None) is False  # the worker's own end comes later: nothing is sent
    assert finished == [("job-a", "the LM died")] and len(streams) == 0


def test_no_chunk_is_sent_after_the_end():
    streams, _ = registry()
    sent = []
    streams.add("a", "job-a")
    assert streams.send("a", lambda: sent.append(1)) is True
    streams.end("a", "gone")
    assert streams.send("a", lambda: sent.append(2)) is False
    assert sent == [1]


def test_end_all_ends_every_live_stream_and_only_those():
    streams, finished = registry()
    for name in "abc":
        streams.add(name, f"job-{name}")
    streams.end("b", None)
    assert streams.end_all("the LM died") == 2
    assert sorted(finished) == [("job-a", "the LM died"), ("job-b", None), ("job-c", "the LM died")]


def test_ending_waits_for_a_chunk_being_sent():
    streams, finished = registry()
    streams.add("a", "job-a")
    in_send, release = threading.Event(), threading.Event()

    def slow_send():
        in_send.set()
        release.wait(5)
    sender = threading.Thread(target=lambda: streams.send("a", slow_send))
    sender.start()
    in_send.wait(5)
    ender = threading.Thread(target=lambda: streams.end("a", "gone"))
    ender.start()
    ender.join(0.2)
    assert ender.is_alive() and finished == []  # the final response waits for the chunk in flight
    release.set()
    sender.join(5)
    ender.join(5)
    assert finished == [("job-a", "gone")]


def watch(probe_result: str | None, has_streams: bool = True, available: bool = True):
    dead: list[str] = []
    probes: list[int] = []

    def probe():
        probes.append(1)
        return probe_result
    return LMWatch(probe, dead.append, lambda: has_streams, lambda: available), dead, probes


def test_a_failing_probe_reports_the_dead_lm():
    lm_watch, dead, _ = watch(f"Stub process 'speechlm_lm_0_0' {UNHEALTHY}.")
    assert lm_watch.check() is True and len(dead) == 1


def test_other_probe_errors_and_answers_are_not_a_death():
    for result in (None, "some other error"):
        lm_watch, dead, _ = watch(result)
        assert lm_watch.check() is False and dead == []


def test_no_probe_without_streams_or_while_the_lm_is_known_down():
    for has_streams, available in ((False, True), (True, False)):
        lm_watch, dead, probes = watch(f"x {UNHEALTHY}", has_streams, available)
        assert lm_watch.check() is False and probes == [] and dead == []
