"""Fault isolation on a server of its own (these tests break it on purpose).

- A request whose codec call raises ends with an error; the streams beside it, in the same
  codec batches, finish untouched. The failure comes from the test-only hook
  (`VOXLANE_FAULT_INJECT`, backend_python/stub_common/fault_inject.py).
- A codec stub process that dies (`codec` or `codec_urgent`): its chunks go to the other codec lane
  at once, so the stream running into the crash and every new one keep their full audio, and the
  router reloads the lane itself (explicit model control): it is ready again, without an operator.
- An LM stub process that dies: its streams end with `lane_down` at once instead of hanging, the
  router reloads it, and it serves again. Behind the gateway, a request that meets the dead LM is a
  503 with `Retry-After` (reason `lane_down`), and with a second, healthy server the gateway serves
  the stream there instead.
"""
from __future__ import annotations

import base64
import itertools
import json
import os
import signal
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from server.compare import free_ports
from server.gateway.config import GatewayConfig
from server.gateway.server import GatewayProcess
from server.serve import DRAIN_S, ServeConfig, Server
from clients.stream import ServerUnreachable, StreamError, synthesize
from backend_python.stub_common import unloads
from server.triton_launch import Ports, stub_shm_regions
from tests.e2e.test_cancel import wait_for
from tests.e2e.test_metrics import scrape
from tools.procstats import server_processes

MARKER = "FAULTY"
FAULT_ENV = {"VOXLANE_FAULT_INJECT": MARKER}  # explicit model control is voxlane serve's default


@pytest.fixture(scope="module")
def faulty_server(model_cache, tmp_path_factory):
    http, grpc, metrics = free_ports(3)
    server = Server(ServeConfig(ports=Ports(http, grpc, metrics)),
                    log_path=tmp_path_factory.mktemp("triton-faults") / "tritonserver.log")
    saved = {key: os.environ.get(key) for key in FAULT_ENV}
    os.environ.update(FAULT_ENV)  # tritonserver inherits them; nothing else in this process reads them
    try:
        server.start(timeout_s=240)
    finally:
        for key, value in saved.items():
            os.environ.pop(key) if value is None else os.environ.__setitem__(key, value)
    yield server
    server.stop(grace_s=0)


@pytest.fixture(autouse=True)
def faulty_server_serves(request):
    """Each test meets the faulty server serving: a test before it may have killed a stub as tritonserver took a
    shared lock, which aborts Triton 2.51 (upstream server#8882), and its keeper is still starting it again."""
    if "faulty_server" in request.fixturenames:
        server = request.getfixturevalue("faulty_server")
        assert wait_for(lambda: not server.is_reviving and is_ready(server), timeout_s=180), server.revivals


def is_ready(server, path: str = "/v2/health/ready") -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.config.ports.http}{path}", timeout=2) as response:
            return response.status == 200
    except OSError:  # not ready (an HTTP error), or not listening (a server being started again)
        return False


def request(url: str, text: str, seed: int, seconds: float = 2.0):
    started = time.perf_counter()
    try:
        result = synthesize(url, text, seed=seed, max_audio_seconds=seconds, ignore_eos=True, timeout_s=60)
        return result, time.perf_counter() - started
    except (StreamError, ServerUnreachable) as exc:  # unreachable: the server went down under the stream
        return str(exc), time.perf_counter() - started


def test_a_failing_codec_call_ends_only_its_own_request(faulty_server):
    url = faulty_server.grpc_url
    texts = [f"A {MARKER} request {i}." if i % 4 == 0 else f"A good request {i}." for i in range(12)]
    with ThreadPoolExecutor(12) as pool:  # together, so the faulty windows share codec batches
        outcomes = list(pool.map(lambda i: request(url, texts[i], seed=i), range(12)))
    for text, (result, _) in zip(texts, outcomes):
        if MARKER in text:
            assert isinstance(result, str) and "injected codec fault" in result, result
        else:
            assert not isinstance(result, str), f"{text}: {result}"
            assert [c.index for c in result.chunks] == list(range(len(result.chunks)))
            assert result.audio.size == 25 * 1920
    assert wait_for(lambda: scrape(faulty_server)["voxlane_live_requests"] == 0, timeout_s=5)
    assert is_ready(faulty_server)


def lane_metrics(server, lane: str) -> tuple[float, float]:
    """(voxlane_lane_up, voxlane_lane_restarts_total) of `lane`."""
    values = scrape(server)
    return values[f'voxlane_lane_up{{lane="{lane}"}}'], values[f'voxlane_lane_restarts_total{{lane="{lane}"}}']


def kill_stub(server, model: str) -> None:
    os.kill(server_processes(server.process.process.pid)[model], signal.SIGKILL)


def wait_reloaded(server, model: str, restarts: int, revivals: int | None = None) -> None:
    """The router reloads `model` by itself: ready again, up, and counted. With `revivals` (the server's count
    before the kill): or, where the stub's death aborted tritonserver (Triton 2.51, upstream server#8882), the
    server's keeper started the whole server again, and its lanes count anew."""
    def healed() -> bool:
        try:
            up, count = lane_metrics(server, model)
        except (OSError, KeyError):  # a server being started again: no metrics yet
            return False
        return up == 1.0 and (count == restarts or (revivals is not None and server.revivals > revivals))

    assert wait_for(healed, timeout_s=120), (model, restarts, server.revivals, server.is_reviving)
    assert is_ready(server, f"/v2/models/{model}/ready") and wait_for(lambda: is_ready(server), timeout_s=30)


@pytest.mark.parametrize("model", ["codec", "codec_urgent"])
def test_a_killed_codec_stub_costs_no_audio_and_the_lane_comes_back_by_itself(faulty_server, model):
    """Where the kill aborts tritonserver itself (the stub died holding a lock the server shares with it: Triton
    2.51, upstream server#8882; timing decides), the streams on it end as the server goes away, never hang, and the
    keeper starts the whole server again; otherwise neither stream loses a frame."""
    url = faulty_server.grpc_url
    restarts, revivals = lane_metrics(faulty_server, model)[1], faulty_server.revivals
    with ThreadPoolExecutor(2) as pool:  # one stream runs into the crash, one starts after it
        running = pool.submit(request, url, "Running through the crash.", 1, 6.0)
        time.sleep(0.5)
        kill_stub(faulty_server, model)
        time.sleep(0.2)
        after = pool.submit(request, url, "Started after the crash.", 2, 6.0)
        outcomes = [running.result(timeout=60), after.result(timeout=60)]
    aborted = wait_for(lambda: faulty_server.revivals > revivals or faulty_server.is_reviving, timeout_s=2)
    for result, _ in outcomes:
        if aborted and isinstance(result, str):
            assert "cannot reach the server" in result, result
            continue
        assert not isinstance(result, str), result
        assert [c.index for c in result.chunks] == list(range(len(result.chunks)))
        assert result.audio.size == 75 * 1920  # 6 s at 12.5 frames/s: every frame decoded
    wait_reloaded(faulty_server, model, restarts + 1, revivals if aborted else None)
    result, _ = request(url, "After the reload.", seed=3, seconds=6.0)
    assert not isinstance(result, str), result
    assert {"urgent", "background"} <= {c.lane for c in result.chunks}  # both lanes serve again
    assert wait_for(lambda: scrape(faulty_server)["voxlane_live_requests"] == 0, timeout_s=5)


def post_speech(gateway: GatewayProcess, text: str) -> tuple[int, dict, bytes]:
    """(status, headers, body) of one PCM request through the gateway."""
    body = json.dumps({"model": "tts-1", "input": text, "voice": "alloy", "response_format": "pcm",
                       "seed": 1, "max_audio_seconds": 0.8, "ignore_eos": True}).encode()
    request = urllib.request.Request(gateway.url + "/v1/audio/speech", data=body,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def started_streams(gateway: GatewayProcess) -> dict[str, int]:
    with urllib.request.urlopen(gateway.url + "/health", timeout=5) as response:
        return {s["url"]: s["streams_started"] for s in json.load(response)["servers"]}


def test_a_killed_lm_stub_ends_its_streams_is_503_behind_the_gateway_and_comes_back_by_itself(
        faulty_server, server, tmp_path):
    """Streams blocked on the dead LM end with a clear error (the router's LM watch probes the LM
    while streams are live) instead of hanging; a request that meets it fails before any audio, so
    the gateway answers 503 (or tries its other server) while the router reloads the LM."""
    url = faulty_server.grpc_url
    faulty, healthy = faulty_server.grpc_url, server.grpc_url
    alone = GatewayProcess(GatewayConfig(tritons=(faulty,), port=free_ports(1)[0]), log_path=tmp_path / "alone.log")
    both = GatewayProcess(GatewayConfig(tritons=(faulty, healthy), port=free_ports(1)[0], down_s=60.0),
                          log_path=tmp_path / "both.log")
    restarts = lane_metrics(faulty_server, "speechlm_lm")[1]
    try:
        alone.wait_ready(60)
        both.wait_ready(60)
        with ThreadPoolExecutor(3) as pool:
            futures = [pool.submit(request, url, f"A long stream, number {i}.", i, 30.0) for i in range(3)]
            assert wait_for(lambda: scrape(faulty_server)["voxlane_live_requests"] == 3, timeout_s=30)
            kill_stub(faulty_server, "speechlm_lm")
            results = [future.result(timeout=60) for future in futures]
        for result, seconds in results:
            assert isinstance(result, str) and "speechlm_lm lane is down" in result, result
        status, headers, body = post_speech(alone, "The LM just died.")
        assert status == 503 and int(headers["Retry-After"]) > 0, (status, body)
        # lane_down from the router; or unavailable where the gateway's readiness poll saw the LM unloaded first
        assert json.loads(body)["error"]["code"] in ("lane_down", "unavailable"), body
        for text in ("Served elsewhere.", "Straight to the healthy one."):
            status, _, body = post_speech(both, text)
            assert status == 200 and len(body) == 10 * 1920 * 2, (status, body[:300])
        # the faulty server is skipped after its refusal, or at once when a readiness poll saw its LM unloaded
        started = started_streams(both)
        assert started[healthy] == 2 and started[faulty] <= 1, started
    finally:
        alone.stop()
        both.stop()
    wait_reloaded(faulty_server, "speechlm_lm", restarts + 1)
    result, _ = request(url, "After the LM came back.", seed=9)
    assert not isinstance(result, str), result
    assert wait_for(lambda: scrape(faulty_server)["voxlane_live_requests"] == 0, timeout_s=5)


STORM_CLIENTS = 3  # gateway clients, beside one direct gRPC client of the faulty server
STOPPED_STREAMS = 8  # live when the server is stopped (a stop during 8 streams once took 5.4 s)
CLEAR_CODES = {"lane_down", "overloaded", "unavailable", "router_restarted"}  # what a server fault may end a stream with
DIRECT_ENDS = ("lane is down", "shutting down", "overloaded", "cannot serve the model now", "was unloaded",
               "cannot reach the server")
WATCHED = ("vox_ensemble", "voice_registry", "voice_encoder")  # no lane: the router's death ends the server


def sse_stream(gateway: GatewayProcess, text: str, seed: int) -> tuple[int, list[int], str | None, int]:
    """(status, the chunk indexes of its audio deltas, the error code or None, its PCM bytes) of one
    SSE request."""
    body = json.dumps({"model": "tts-1", "input": text, "voice": "alloy", "response_format": "pcm",
                       "stream_format": "sse", "seed": seed, "max_audio_seconds": 1.6, "ignore_eos": True}).encode()
    req = urllib.request.Request(gateway.url + "/v1/audio/speech", data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as response:
            events = [json.loads(line[6:]) for line in response.read().decode().splitlines() if line.startswith("data: ")]
    except urllib.error.HTTPError as exc:
        return exc.code, [], json.loads(exc.read())["error"]["code"], 0
    indexes = [e["chunk_index"] for e in events if e["type"] == "speech.audio.delta" and "chunk_index" in e]
    errors = [e.get("error", e).get("code") for e in events if e["type"] == "error"]
    done = any(e["type"] == "speech.audio.done" for e in events)
    num_bytes = sum(len(base64.b64decode(e["audio"])) for e in events if e["type"] == "speech.audio.delta")
    return 200, indexes, errors[0] if errors else (None if done else "no_end"), num_bytes


def storm_traffic(gateway: GatewayProcess, direct_url: str, is_direct_paused, stop) -> list:
    """Concurrent streams until `stop` is set: gateway SSE clients, and one direct gRPC client."""
    outcomes: list = []

    def via_gateway(client: int) -> None:
        for i in itertools.count():
            if stop.is_set():
                return
            outcomes.append(("gateway", sse_stream(gateway, f"Storm {client} {i}.", seed=i)))

    def direct() -> None:
        for i in itertools.count():
            if stop.is_set():
                return
            if is_direct_paused():
                time.sleep(0.2)
                continue
            outcomes.append(("direct", request(direct_url, f"Direct {i}.", seed=i, seconds=1.6)[0]))
            if isinstance(outcomes[-1][1], str):
                time.sleep(0.2)  # a client backs off after a failure

    threads = [threading.Thread(target=via_gateway, args=(c,)) for c in range(STORM_CLIENTS)]
    threads.append(threading.Thread(target=direct))
    for thread in threads:
        thread.start()
    return outcomes, threads


def check_storm_outcome(where: str, outcome) -> None:
    """A stream completed with its chunks 0, 1, 2, … or ended with a clear reason; never a 400 or 500."""
    if where == "direct":
        if isinstance(outcome, str):  # a StreamError's message: the reason is in the server's words
            assert any(end in outcome for end in DIRECT_ENDS), outcome
        else:
            assert [c.index for c in outcome.chunks] == list(range(len(outcome.chunks)))
        return
    status, indexes, code, num_bytes = outcome
    assert status in (200, 503), outcome
    assert indexes == list(range(len(indexes))), outcome
    assert code is None or code in CLEAR_CODES, outcome
    if status == 200 and code is None:
        assert num_bytes == 20 * 1920 * 2, outcome  # 1.6 s of 16-bit PCM: every frame of a completed stream


def long_streams(url: str, num: int) -> list:
    pool = ThreadPoolExecutor(num)
    return [pool.submit(request, url, f"A long stream cut by the stop {i}.", i, 30.0) for i in range(num)]


def test_a_fault_storm_ends_every_stream_cleanly_and_heals_without_an_operator(faulty_server, server, tmp_path):
    """Traffic through a gateway in front of two servers while each lane stub of one server is killed
    in turn, then its router's, registry's and encoder's stubs (the router's death restarts the server; the router
    reloads the registry and the encoder), then that server is stopped (with 8 streams in flight: they end with
    `lane_down`, "the server is shutting down", before the SIGTERM, and tritonserver exits within 5 s of it) and
    started again."""
    faulty, healthy = faulty_server.grpc_url, server.grpc_url
    gateway = GatewayProcess(GatewayConfig(tritons=(faulty, healthy), port=free_ports(1)[0]),
                             log_path=tmp_path / "gateway.log")
    gateway.wait_ready(60)
    stop, is_down = threading.Event(), threading.Event()
    outcomes, threads = storm_traffic(gateway, faulty, is_down.is_set, stop)
    try:
        for model in ("codec", "codec_urgent", "speechlm_lm"):
            restarts, revivals = lane_metrics(faulty_server, model)[1], faulty_server.revivals
            time.sleep(1.0)  # streams are running into the kill
            kill_stub(faulty_server, model)
            wait_reloaded(faulty_server, model, restarts + 1, revivals)
        for model in WATCHED:
            revivals, dead = faulty_server.revivals, server_processes(faulty_server.process.process.pid)[model]
            time.sleep(1.0)
            kill_stub(faulty_server, model)
            # the registry and the encoder reloaded by the router; the router's death ends its server, whose keeper
            # starts it again (as it does where a stub's death aborted tritonserver: Triton 2.51, upstream
            # server#8882)
            assert wait_for(lambda: faulty_server.revivals > revivals or
                            server_processes(faulty_server.process.process.pid).get(model) not in (None, dead),
                            timeout_s=120), model
            assert wait_for(lambda: is_ready(faulty_server, f"/v2/models/{model}/ready"), timeout_s=120), model
        assert wait_for(lambda: is_ready(faulty_server), timeout_s=30)
        assert wait_for(lambda: lists_voices(gateway), timeout_s=30)  # the registries answer again
        cut = long_streams(faulty, STOPPED_STREAMS)
        assert wait_for(lambda: scrape(faulty_server)["voxlane_live_requests"] >= STOPPED_STREAMS, timeout_s=30)
        is_down.set()
        started = time.monotonic()
        faulty_server.stop()  # the server, not only its tritonserver: its keeper would start that again
        stop_s = time.monotonic() - started
        for future in cut:
            result, _ = future.result(timeout=30)
            assert isinstance(result, str) and "shutting down" in result, result
        # the streams end before the SIGTERM (Server._drain), then tritonserver exits within 5 s
        times = faulty_server.last_stop
        assert times.is_drained and times.drain_s <= DRAIN_S and times.exit_s <= 5.0, times
        assert stop_s <= times.drain_s + times.exit_s + 1.0, f"the stop took {stop_s:.1f} s: {times}"
        faulty_server.start(timeout_s=240)  # the gateway serves from the other server meanwhile
        is_down.clear()
        assert wait_for(lambda: all(s["ready"] for s in gateway_health(gateway)["servers"]), timeout_s=30)
        time.sleep(2.0)  # traffic reaches the restarted server again
    finally:
        stop.set()
        for thread in threads:
            thread.join(90)
        gateway.stop()
    broken = []
    for where, outcome in outcomes:
        try:
            check_storm_outcome(where, outcome)
        except AssertionError as exc:
            broken.append((where, str(exc)[:300]))
    assert not broken, broken
    through_gateway = [o for w, o in outcomes if w == "gateway"]
    completed = [o for o in through_gateway if o[0] == 200 and o[2] is None]
    assert len(completed) >= len(through_gateway) // 2, through_gateway  # most were served through it all
    for model in ("vox_ensemble", "speechlm_lm", "codec", "codec_urgent", "voice_registry", "voice_encoder"):
        assert is_ready(faulty_server, f"/v2/models/{model}/ready")
    assert is_ready(faulty_server) and is_ready(server)


def lists_voices(gateway: GatewayProcess) -> bool:
    try:
        with urllib.request.urlopen(gateway.url + "/v1/audio/voices", timeout=10) as response:
            return response.status == 200 and "data" in json.load(response)
    except urllib.error.HTTPError:
        return False


def gateway_health(gateway: GatewayProcess) -> dict:
    with urllib.request.urlopen(gateway.url + "/health", timeout=10) as response:
        return json.load(response)


def test_a_stop_leaves_no_shared_memory_or_temporary_folder_of_its_stubs_killed_and_healed(faulty_server):
    """Last in this module (it stops the server). A router stub killed under a stream leaves its shared memory behind
    (Triton 2.51 never finishes unloading the dead instance that maps it, its stream's answer pending; now its
    server ends and is started again), and every stub's unload leaves a mark: after the server healed, nothing of
    either start is left once it stops, its run directory neither."""
    assert wait_for(lambda: _speaks(faulty_server.grpc_url), timeout_s=240)
    seen = _server_leftovers(faulty_server)
    with ThreadPoolExecutor(1) as pool:
        cut = pool.submit(request, faulty_server.grpc_url, "A stream under the kill.", 1, 30.0)
        assert wait_for(lambda: scrape(faulty_server)["voxlane_live_requests"] == 1, timeout_s=30)
        kill_stub(faulty_server, "vox_ensemble")
        assert isinstance(cut.result(timeout=60)[0], str)  # ended with an error
    assert wait_for(lambda: _speaks(faulty_server.grpc_url), timeout_s=240)
    seen |= _server_leftovers(faulty_server)
    faulty_server.stop()  # a clean stop: the lanes' unloads leave their marks
    assert [path for path in seen if path.exists()] == []


def _server_leftovers(server) -> set[Path]:
    """What a server's stop must remove: its stubs' shared memory, its folder of unload marks, its run directory."""
    pid = server.process.process.pid
    return {*stub_shm_regions(pid), unloads.folder(pid), server.run_dir}


def _speaks(url: str) -> bool:
    return not isinstance(request(url, "Back again.", seed=2, seconds=0.4)[0], str)
