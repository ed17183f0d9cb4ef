"""LM admission: prefill-first vs deadline-aware, with the starvation guard."""
import pytest

from scheduler import (AdmissionPolicyName, AdmissionState, DeadlineAwarePolicy, PrefillFirstPolicy,
                       SchedulerConfig, StreamStatus, WaitingRequest, make_admission_policy)

NOW = 100.0


def waiting(*prefills, arrival=NOW - 0.1):
    return [WaitingRequest(f"w{i}", arrival, p) for i, p in enumerate(prefills)]


def playing(request_id, buffered_s, started_ago=5.0):
    """A stream that started `started_ago` seconds ago and has `buffered_s` audio left."""
    return StreamStatus(request_id, emitted_audio_s=started_ago + buffered_s, t_first_emitted=NOW - started_ago)


def state(running, waiting_requests, free=8, step=0.02):
    return AdmissionState(now=NOW, num_free_slots=free, step_time_s=step,
                          running=running, waiting=waiting_requests)


def deadline_aware(margin=0.1, max_wait=2.0):
    return DeadlineAwarePolicy(margin_s=margin, max_wait_s=max_wait)


def test_buffered_audio():
    stream = StreamStatus("a", emitted_audio_s=3.0, t_first_emitted=10.0)
    assert stream.buffered_s(11.0) == pytest.approx(2.0)
    assert stream.buffered_s(14.0) == pytest.approx(-1.0)  # stalling
    assert StreamStatus("b", 0.0, None).buffered_s(11.0) is None


def test_prefill_first_admits_up_to_free_slots_in_order():
    policy = PrefillFirstPolicy()
    s = state([playing("r", buffered_s=0.0)], waiting(0.5, 0.5, 0.5), free=2)
    assert policy.admit(s) == ["w0", "w1"]
    assert policy.admit(state([], waiting(0.5), free=0)) == []


def test_deadline_aware_admits_freely_without_playing_streams():
    policy = deadline_aware()
    not_started = StreamStatus("r", 0.0, None)
    assert policy.admit(state([], waiting(9.0, 9.0))) == ["w0", "w1"]
    assert policy.admit(state([not_started], waiting(9.0), free=1)) == ["w0"]


def test_deadline_aware_admits_while_min_buffer_covers_prefill_step_margin():
    policy = deadline_aware(margin=0.1)
    running = [playing("a", 2.0), playing("b", 0.5)]  # min buffered 0.5 -> budget 0.38
    assert policy.admit(state(running, waiting(0.2, 0.1, 0.1))) == ["w0", "w1"]


def test_deadline_aware_boundary_is_inclusive():
    policy = deadline_aware(margin=0.25)
    running = [StreamStatus("a", emitted_audio_s=1.5, t_first_emitted=NOW - 0.5)]  # buffered 1.0
    assert policy.admit(state(running, waiting(0.5), step=0.25)) == ["w0"]  # 1.0 >= 0.5+0.25+0.25
    assert policy.admit(state(running, waiting(0.5001), step=0.25)) == []


def test_deadline_aware_is_fifo_no_overtaking():
    policy = deadline_aware(margin=0.1)
    running = [playing("a", 0.5)]  # budget 0.38
    assert policy.admit(state(running, waiting(1.0, 0.01))) == []


def test_deadline_aware_holds_back_when_a_stream_stalls():
    policy = deadline_aware()
    running = [playing("a", 5.0), playing("b", -0.2)]
    assert policy.admit(state(running, waiting(0.0))) == []


def test_starvation_guard_admits_overdue_request_anyway():
    policy = deadline_aware(max_wait=2.0)
    running = [playing("a", 0.0)]
    old = WaitingRequest("old", NOW - 2.0, 0.3)  # waited exactly max_wait: overdue
    new = WaitingRequest("new", NOW - 0.1, 0.0)
    assert policy.admit(state(running, [old, new])) == ["old"]
    assert policy.admit(state(running, [WaitingRequest("young", NOW - 1.99, 0.3)])) == []


def test_overdue_prefill_spends_budget_of_later_requests():
    policy = deadline_aware(margin=0.0, max_wait=1.0)
    running = [playing("a", 1.0)]  # budget 1.0 - 0.02 = 0.98
    old = WaitingRequest("old", NOW - 5.0, 0.9)
    fits_alone = WaitingRequest("new", NOW, 0.5)
    assert policy.admit(state(running, [fits_alone])) == ["new"]
    assert policy.admit(state(running, [old, fits_alone])) == ["old"]


def test_starvation_guard_respects_free_slots():
    policy = deadline_aware(max_wait=0.0)
    assert policy.admit(state([playing("a", 0.0)], waiting(1.0, 1.0, 1.0), free=2)) == ["w0", "w1"]


def test_policy_from_config():
    assert isinstance(make_admission_policy(SchedulerConfig(admission_policy=AdmissionPolicyName.PREFILL_FIRST)),
                      PrefillFirstPolicy)
    assert isinstance(make_admission_policy(SchedulerConfig()), DeadlineAwarePolicy)


def test_invalid_inputs_raise():
    with pytest.raises(ValueError):
        WaitingRequest("w", 0.0, -1.0)
    with pytest.raises(ValueError):
        state([], [], free=-1)
    with pytest.raises(ValueError):
        DeadlineAwarePolicy(margin_s=-0.1, max_wait_s=1.0)
