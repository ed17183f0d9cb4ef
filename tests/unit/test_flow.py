"""The backpressure bookkeeping (scheduler/flow.py), with a fake clock."""
from __future__ import annotations

import numpy as np
import pytest

from backend_python.vox_ensemble.acks import AckRoutes, parse_ack
from backend_python.stub_common.request_inputs import RequestError
from scheduler import AckedFlow, FlowConfig, UnreadBound


def test_playback_takes_real_time_audio_from_the_first_chunk():
    bound = UnreadBound(max_unread_frames=10, frame_rate=12.5, acks=False)
    assert not bound.is_paused(9, now=5.0, t_first=None)
    assert bound.is_paused(10, now=1.0, t_first=1.0)
    assert not bound.is_paused(10, now=1.0 + 1 / 12.5, t_first=1.0)  # one frame played
    assert bound.resumes_at(10, t_first=1.0) == pytest.approx(1.0 + 1 / 12.5)


def test_an_acking_bound_moves_only_with_updates_and_never_back():
    bound = UnreadBound(max_unread_frames=10, frame_rate=12.5, acks=True)
    assert bound.is_paused(10, now=100.0, t_first=0.0) and bound.resumes_at(10, 0.0) is None
    bound.on_taken(4)
    bound.on_taken(2)
    assert bound.taken_frames == 4 and not bound.is_paused(13, now=0.0, t_first=0.0)


def test_a_zero_bound_never_pauses():
    assert not UnreadBound(0, 12.5, acks=True).is_paused(10_000, 0.0, 0.0)


def test_the_lm_is_told_in_quarter_bound_steps_and_at_once_when_it_may_be_paused():
    flow = AckedFlow(max_unread_s=4.0, stall_timeout_s=30.0)
    flow.on_sent(0, 0.5, end_frame=6, now=0.0)
    assert not flow.on_ack(0, now=0.1)  # 0.5 s taken: under a quarter of the bound
    flow.on_sent(1, 0.8, end_frame=16, now=0.2)
    assert flow.on_ack(1, now=0.3) and flow.told_frames == 16  # 1.3 s: past a quarter
    for i in range(2, 7):
        flow.on_sent(i, 0.8, end_frame=16 + 10 * (i - 1), now=1.0)
    assert flow.is_lm_paused  # 4 s sent past what the LM was told
    assert flow.on_ack(2, now=1.1) and flow.told_frames == 26  # told at once, though only 0.8 s more
    assert not flow.on_ack(2, now=1.2)  # a repeated ack is nothing new


def test_a_client_that_takes_nothing_stalls_after_the_timeout_from_its_oldest_waiting_chunk():
    flow = AckedFlow(max_unread_s=4.0, stall_timeout_s=3.0)
    assert not flow.is_stalled(now=100.0)  # nothing sent: nothing waits for the client
    flow.on_sent(0, 0.5, 6, now=10.0)
    assert not flow.is_stalled(12.9) and flow.is_stalled(13.0)
    flow.on_ack(0, now=12.0)
    assert not flow.is_stalled(100.0)
    flow.on_sent(1, 0.5, 12, now=20.0)
    assert flow.stalled_s(21.0) == pytest.approx(1.0)


def test_flow_settings_round_trip_and_refuse_negative_values():
    config = FlowConfig(2.5, 10.0)
    assert FlowConfig.from_parameters(config.to_parameters()) == config
    with pytest.raises(ValueError):
        FlowConfig(-1.0, 1.0)


def test_an_ack_holds_one_chunk_index_and_nothing_else():
    def get(arrays):
        return lambda name: arrays.get(name)

    assert parse_ack(get({"text": np.array([b"hi"])}), has_other_inputs=False) is None
    assert parse_ack(get({"ack_chunk": np.array([3], np.int32)}), has_other_inputs=False) == 3
    with pytest.raises(RequestError, match="only 'ack_chunk'"):
        parse_ack(get({"ack_chunk": np.array([3], np.int32)}), has_other_inputs=True)
    with pytest.raises(RequestError, match=">= 0"):
        parse_ack(get({"ack_chunk": np.array([-1], np.int32)}), has_other_inputs=False)


def test_acking_streams_need_a_unique_request_id():
    routes = AckRoutes()
    routes.register("a", "stream-1")
    with pytest.raises(RequestError, match="already"):
        routes.register("a", "stream-2")
    with pytest.raises(RequestError, match="needs a request id"):
        routes.register("", "stream-3")
    routes.unregister("a")
    routes.register("a", "stream-4")
    assert routes.stream_of("a") == "stream-4"
