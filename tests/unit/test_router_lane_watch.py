"""The router's live-stream registry (each stream ends once; no chunk after its end) and the LM watch
(a dead LM, seen by a failing probe, ends the streams that wait on it)."""
from __future__ import annotations

import threading

from tests.unit.test_stub_process import SERVER, fake_proc
from backend_python.vox_ensemble.live_streams import LiveStreams
from backend_python.vox_ensemble.lane_watch import LaneWatch
from backend_python.vox_ensemble.stub_process import StubWatch
from protocol.reasons import DONE, Ended, EndReason

LM_DIED = Ended(EndReason.LANE_DOWN, "the LM died")
GONE = Ended(EndReason.CANCELLED, "gone")


def registry():
    finished: list[tuple[str, Ended]] = []
    return LiveStreams(lambda job, error: finished.append((job, error))), finished


def test_a_stream_ends_once_whoever_ends_it():
    streams, finished = registry()
    streams.add("a", "job-a")
    assert streams.end("a", LM_DIED) is True
    assert streams.end("a", DONE) is False  # the worker's own end comes later: nothing is sent
    assert finished == [("job-a", LM_DIED)] and len(streams) == 0


def test_no_chunk_is_sent_after_the_end():
    streams, _ = registry()
    sent = []
    streams.add("a", "job-a")
    assert streams.send("a", lambda: sent.append(1)) is True
    streams.end("a", GONE)
    assert streams.send("a", lambda: sent.append(2)) is False
    assert sent == [1]


def test_end_all_ends_every_live_stream_and_only_those():
    streams, finished = registry()
    for name in "abc":
        streams.add(name, f"job-{name}")
    streams.end("b", DONE)
    assert streams.end_all(LM_DIED) == 2
    assert sorted(finished) == [("job-a", LM_DIED), ("job-b", DONE), ("job-c", LM_DIED)]


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
    ender = threading.Thread(target=lambda: streams.end("a", GONE))
    ender.start()
    ender.join(0.2)
    assert ender.is_alive() and finished == []  # the final response waits for the chunk in flight
    release.set()
    sender.join(5)
    ender.join(5)
    assert finished == [("job-a", GONE)]


def watch(is_dead: bool, available: bool = True):
    dead: list[int] = []
    probes: list[int] = []

    def probe() -> bool:
        probes.append(1)
        return is_dead
    return LaneWatch(probe, lambda: dead.append(1), lambda: available), dead, probes


def test_a_probe_that_finds_the_stub_gone_reports_the_dead_lm():
    lm_watch, dead, _ = watch(True)
    assert lm_watch.check() is True and dead == [1]


def test_a_living_stub_is_not_a_death():
    lm_watch, dead, probes = watch(False)
    assert lm_watch.check() is False and dead == [] and probes == [1]


def test_no_probe_while_the_lm_is_known_down():
    lm_watch, dead, probes = watch(True, available=False)
    assert lm_watch.check() is False and probes == [] and dead == []


def test_a_stub_killed_as_the_first_stream_starts_is_a_death(tmp_path):
    """The watch probes with no stream live, so it knows the LM's stub before a stream starts: a kill right then is a
    death (it once first looked with a stream live, found no stub, took that for "not found yet", and the stream hung)."""
    proc = fake_proc(tmp_path)
    lm_watch = LaneWatch(StubWatch("speechlm_lm", SERVER, proc).is_dead, lambda: None, lambda: True)
    assert lm_watch.check() is False  # idle: the stub is found
    (proc / "202" / "stat").unlink()  # killed; then a stream starts
    assert lm_watch.check() is True
