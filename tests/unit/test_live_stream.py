"""`clients.live_stream.LiveStream.read` maps `clients.stream.next_response`'s ends onto its `Outcome`:
a timeout is `is_timed_out`, a lost router an error whose stream is then cancelled, not half-closed."""
from __future__ import annotations

import queue
import threading

import pytest

import clients.live_stream as live_stream
import clients.stream as stream


class FakeClient:
    """A gRPC client whose stream never answers and whose router is loaded while `is_router_ready`."""

    is_router_ready = True

    def __init__(self, url: str) -> None:
        self.cancel_requests = None

    def start_stream(self, callback) -> None:
        pass

    def async_stream_infer(self, *args, **kwargs) -> None:
        pass

    def is_model_ready(self, model: str, client_timeout: float) -> bool:
        return self.is_router_ready

    def stop_stream(self, cancel_requests: bool) -> None:
        self.cancel_requests = cancel_requests

    def close(self) -> None:
        pass


@pytest.fixture
def fake_client(monkeypatch):
    monkeypatch.setattr(live_stream.grpcclient, "InferenceServerClient", FakeClient)
    monkeypatch.setattr(stream, "ROUTER_CHECK_S", 0.01)
    monkeypatch.setattr(stream, "ROUTER_ANSWER_S", 0.3)
    monkeypatch.setattr(FakeClient, "is_router_ready", True)
    return FakeClient


def test_a_silent_stream_times_out_with_no_error(fake_client):
    live = live_stream.LiveStream("fake:1", [])
    outcome = live.read(timeout_s=0.05)
    assert outcome.is_timed_out and outcome.error is None and not outcome.is_ended


def test_a_lost_router_ends_the_read_with_its_error_and_the_stream_is_cancelled(fake_client):
    fake_client.is_router_ready = False
    live = live_stream.LiveStream("fake:1", [])
    outcome = live.read(timeout_s=5.0)
    assert not outcome.is_timed_out and "vox_ensemble" in outcome.error and outcome.is_ended
    live.close(cancel=True)
    assert live._client.cancel_requests is True


def test_the_answer_an_unloading_router_sends_wins_over_its_loss(fake_client):
    """A stop unloads the router, which ends its streams itself: an answer that comes within ROUTER_ANSWER_S of
    the router's loss is the stream's end, not the loss."""
    fake_client.is_router_ready = False
    responses = queue.Queue()
    threading.Timer(0.1, responses.put, [("the final answer", "the server is shutting down")]).start()
    assert stream.next_response(responses, deadline=1e12, timeout_s=5.0, client=fake_client("fake:1")) == \
        ("the final answer", "the server is shutting down")
    with pytest.raises(stream.RouterLost, match="vox_ensemble"):
        stream.next_response(queue.Queue(), deadline=1e12, timeout_s=5.0, client=fake_client("fake:1"))
