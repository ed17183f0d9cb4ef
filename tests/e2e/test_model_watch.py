"""The processes nobody else watched heal (clients/model_watch.py), against a real tritonserver and the gateway:
after `kill -9` of the router's stub (`vox_ensemble`) the gateway's stream in flight on it ends with an error
instead of hanging, the router is reloaded and serves new streams; after `kill -9` of the registry's stub the
voice list answers again; after `kill -9` of the encoder's stub it is reloaded though no stream meets it."""
from __future__ import annotations

import json
import logging
import os
import signal
import threading
import urllib.request

import pytest

from clients.procstats import is_alive, server_processes
from clients.stream import ServerUnreachable, StreamError, synthesize
from tests.e2e.conftest import DEFAULT_PRESET, server_and_gateway
from tests.e2e.test_metrics import scrape
from tests.waiting import wait_for

HEAL_S = 30.0  # the watch looks twice a second; an unload and a load take a few seconds on two cores
REVIVE_S = 120.0  # a whole tritonserver started again by the server's keeper (its models loaded on two cores)


@pytest.fixture(scope="module")
def watched(model_cache, tmp_path_factory):
    with server_and_gateway(tmp_path_factory) as both:
        yield both


def stub_pid(srv, model: str) -> int | None:
    return server_processes(srv.process.process.pid).get(model)


def server_state(srv) -> str:
    """For a failure's message: is tritonserver alive, which stubs run, and the end of its log."""
    pid = srv.process.process.pid
    log = srv.log_path.read_text(errors="replace")[-3000:] if srv.log_path and srv.log_path.exists() else "(no log)"
    return f"tritonserver alive: {is_alive(pid)}, stubs: {sorted(server_processes(pid))}\nits log ends:\n{log}"


def sse_events(url: str, body: dict, events: list, first: threading.Event) -> None:
    request = urllib.request.Request(url + "/v1/audio/speech", data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        for line in response:
            if line.startswith(b"data: "):
                events.append(json.loads(line[6:]))
                first.set()


def test_a_killed_router_ends_the_gateways_stream_with_an_error_and_is_reloaded(watched):
    srv, gateway = watched
    body = {"model": DEFAULT_PRESET, "input": "A long story.", "voice": "tiny", "stream_format": "sse",
            "response_format": "pcm", "seed": 3, "max_audio_seconds": 40.0, "ignore_eos": True}
    events, first = [], threading.Event()
    reader = threading.Thread(target=sse_events, args=(gateway.url, body, events, first), daemon=True)
    reader.start()
    assert first.wait(30)
    router = stub_pid(srv, "vox_ensemble")
    os.kill(router, signal.SIGKILL)
    # the strict readiness says so while the router is down (held unloaded 2 s by the watch)
    assert wait_for(lambda: not srv.process.is_ready(), timeout_s=HEAL_S, poll_s=0.05), server_state(srv)
    reader.join(HEAL_S)
    assert not reader.is_alive(), "the stream on the dead router hung"
    assert events[-1]["type"] == "error" and events[-1]["error"]["code"] in _router_death_codes(srv), \
        f"{events[-1]}\n{server_state(srv)}"
    assert wait_for(lambda: stub_pid(srv, "vox_ensemble") not in (None, router), timeout_s=REVIVE_S, poll_s=0.2)
    assert wait_for(lambda: _speaks(srv.grpc_url), timeout_s=REVIVE_S, poll_s=0.5), server_state(srv)
    assert srv.watch.restarts["vox_ensemble"] == (0 if srv.revivals else 1)


def _router_death_codes(srv) -> tuple[str, ...]:
    """`router_restarted`; or, where the stub's death aborted tritonserver itself (Triton 2.51's Python
    backend, upstream server#8882: timing decides) and the server's keeper started it again, the 503 of a
    server that went away."""
    srv_died = wait_for(lambda: srv.revivals > 0 or srv.is_reviving, timeout_s=1.0, poll_s=0.1)
    return ("router_restarted", "unavailable") if srv_died else ("router_restarted",)


def test_a_killed_router_ends_a_direct_grpc_stream_with_an_error(watched):
    """Without the gateway: `clients.stream` (and `voxlane say`) sees the router unloaded and ends the stream,
    rather than wait out its deadline for responses that died with the router."""
    srv, _ = watched
    assert wait_for(lambda: _speaks(srv.grpc_url), timeout_s=REVIVE_S, poll_s=0.5), server_state(srv)  # a router
    restarts, revivals = srv.watch.restarts["vox_ensemble"], srv.revivals
    outcome: list = []

    def listen() -> None:
        try:
            outcome.append(synthesize(srv.grpc_url, "A long story.", seed=4, max_audio_seconds=40.0, ignore_eos=True,
                                      acks=False, timeout_s=120.0))
        except (StreamError, ServerUnreachable) as exc:
            outcome.append(exc)

    reader = threading.Thread(target=listen, daemon=True)
    reader.start()
    assert wait_for(lambda: stub_pid(srv, "vox_ensemble") is not None and _is_live(srv), timeout_s=30, poll_s=0.2)
    os.kill(stub_pid(srv, "vox_ensemble"), signal.SIGKILL)
    reader.join(HEAL_S)
    assert not reader.is_alive(), "the direct stream on the dead router hung"
    if wait_for(lambda: srv.revivals > revivals or srv.is_reviving, timeout_s=1.0, poll_s=0.1):
        # the stub's death aborted tritonserver (Triton 2.51, upstream server#8882): the stream ends with the server
        assert isinstance(outcome[0], (StreamError, ServerUnreachable)), outcome
    else:
        assert isinstance(outcome[0], StreamError) and outcome[0].ended.code == "router_restarted", outcome
        assert wait_for(lambda: srv.watch.restarts["vox_ensemble"] == restarts + 1, timeout_s=HEAL_S, poll_s=0.2)
    assert wait_for(lambda: _speaks(srv.grpc_url), timeout_s=REVIVE_S, poll_s=0.5), server_state(srv)


def _is_live(srv) -> bool:
    return scrape(srv)["voxlane_live_requests"] >= 1


def test_a_killed_registry_is_reloaded_and_lists_voices_again(watched):
    srv, gateway = watched
    assert wait_for(lambda: stub_pid(srv, "voice_registry") is not None, timeout_s=REVIVE_S, poll_s=0.5)
    registry, restarts = stub_pid(srv, "voice_registry"), srv.watch.restarts["voice_registry"]
    os.kill(registry, signal.SIGKILL)
    assert wait_for(lambda: stub_pid(srv, "voice_registry") not in (None, registry), timeout_s=HEAL_S, poll_s=0.2)
    assert wait_for(lambda: _lists(gateway.url), timeout_s=HEAL_S, poll_s=0.5)
    assert srv.watch.restarts["voice_registry"] == restarts + 1


def _speaks(url: str) -> bool:
    try:
        return synthesize(url, "Back.", seed=1, max_audio_seconds=0.4, ignore_eos=True).audio.size > 0
    except Exception:  # noqa: BLE001 - not yet: the router is still loading
        return False


def _lists(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/v1/audio/voices", timeout=10) as response:
            return response.status == 200 and "data" in json.load(response)
    except OSError:
        return False


def test_a_killed_encoder_is_reloaded_with_no_stream_to_meet_it(watched):
    srv, _ = watched
    assert wait_for(lambda: stub_pid(srv, "voice_encoder") is not None, timeout_s=REVIVE_S, poll_s=0.5)
    encoder, restarts = stub_pid(srv, "voice_encoder"), srv.watch.restarts["voice_encoder"]
    os.kill(encoder, signal.SIGKILL)
    assert wait_for(lambda: stub_pid(srv, "voice_encoder") not in (None, encoder), timeout_s=HEAL_S, poll_s=0.2)
    assert wait_for(lambda: srv.watch.restarts["voice_encoder"] == restarts + 1, timeout_s=HEAL_S, poll_s=0.2)



def test_a_killed_tritonserver_is_started_again_by_its_keeper(watched, caplog):
    """Last in this module: the whole server dies (as Triton 2.51 may when a stub dies holding a shared lock),
    and `Server`'s keeper starts it again on the same ports: the gateway in front serves again."""
    srv, gateway = watched
    old, revivals = srv.process.process.pid, srv.revivals
    with caplog.at_level(logging.WARNING, logger="voxlane.serve"):
        os.kill(old, signal.SIGKILL)
        assert wait_for(lambda: srv.revivals == revivals + 1, timeout_s=REVIVE_S, poll_s=0.5), server_state(srv)
    assert "tritonserver exited with signal SIGKILL: starting it again" in caplog.text
    assert srv.process.process.pid != old and srv.is_serving() and stub_pid(srv, "vox_ensemble") is not None
    assert _speaks(srv.grpc_url)
    assert wait_for(lambda: _lists(gateway.url), timeout_s=HEAL_S, poll_s=0.5)
