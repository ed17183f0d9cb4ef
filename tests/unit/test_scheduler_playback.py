"""PlaybackClock: deadlines from the send time of chunk 0 and the durations before each chunk."""
import queue
import threading

import pytest

from scheduler import PlaybackClock


class FakeClock:
    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def advance(self, dt: float) -> float:
        self.t += dt
        return self.t


def test_no_deadline_while_first_chunk_in_flight():
    clock = PlaybackClock()
    clock.on_emitted(0, 0.32)
    assert clock.deadline(0) is None
    assert clock.deadline(1) is None
    assert clock.slack(1, now=5.0, expected_latency=0.0) is None
    assert not clock.is_playing


def test_deadlines_follow_sent_durations():
    fake = FakeClock()
    clock = PlaybackClock()
    clock.on_sent(0, 0.32, fake.t)
    assert clock.t_first == 100.0
    assert clock.deadline(0) == 100.0
    assert clock.deadline(1) == pytest.approx(100.32)
    clock.on_sent(1, 0.8, fake.advance(0.2))
    assert clock.deadline(2) == pytest.approx(101.12)
    assert clock.num_sent == 2


def test_emitted_durations_give_deadlines_before_send():
    clock = PlaybackClock()
    clock.on_sent(0, 0.32, 10.0)
    clock.on_emitted(1, 0.8)  # chunk 1 is decoding, chunk 2 is routed meanwhile
    assert clock.deadline(2) == pytest.approx(11.12)
    with pytest.raises(ValueError):
        clock.deadline(3)  # duration of chunk 2 unknown


def test_sent_duration_overrides_emitted_estimate():
    clock = PlaybackClock()
    clock.on_emitted(0, 0.32)
    clock.on_sent(0, 0.30, 1.0)
    assert clock.deadline(1) == pytest.approx(1.30)


def test_slack_subtracts_now_and_latency():
    clock = PlaybackClock()
    clock.on_sent(0, 1.0, 0.0)
    assert clock.slack(1, now=0.5, expected_latency=0.1) == pytest.approx(0.4)
    assert clock.slack(1, now=1.2, expected_latency=0.1) == pytest.approx(-0.3)  # late


@pytest.mark.parametrize("index", [1, 0])
def test_out_of_order_or_duplicate_send_raises(index):
    clock = PlaybackClock()
    if index == 0:
        clock.on_sent(0, 0.3, 0.0)  # then a duplicate of chunk 0
    with pytest.raises(ValueError):
        clock.on_sent(index, 0.3, 1.0)


def test_out_of_order_emit_and_negative_duration_raise():
    clock = PlaybackClock()
    with pytest.raises(ValueError):
        clock.on_emitted(1, 0.3)
    with pytest.raises(ValueError):
        clock.on_sent(0, -0.1, 0.0)


def test_emit_and_send_from_two_threads():
    """The LM thread emits chunk i+1 while the sending thread sends chunk i."""
    clock = PlaybackClock()
    n = 2000
    emitted = queue.Queue()

    def emit():
        for i in range(n):
            clock.on_emitted(i, 0.1)
            emitted.put(i)

    def send():
        for _ in range(n):
            i = emitted.get()
            clock.on_sent(i, 0.1, float(i))

    threads = [threading.Thread(target=emit), threading.Thread(target=send)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert clock.num_sent == n
    assert clock.t_first == 0.0
    assert clock.deadline(n) == pytest.approx(0.1 * n)
