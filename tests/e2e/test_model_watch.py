"""No stream hangs when a model's process dies, for any kind of client: the gateway's, a plain `tritonclient` gRPC
stream (no VoxLane client code: no acks, no look at the router's readiness) and perf_analyzer. After `kill -9` of
any stub each stream completes or ends with an error within seconds. The router's death ends the whole server
(server/model_watch.py: Triton 2.51 keeps the dead router's streams open until their clients give up), whose keeper
starts it again; the router heals the others itself, the voice registry and an idle encoder included.

perf_analyzer is left out of the router's death: its gRPC client (2.51) ends a stream the server closed without
telling its caller (`AsyncStreamTransfer` reads until the stream breaks and only calls `Finish`), so only a response
ends its wait, and the process that could send one is the router that died (docs/RELIABILITY.md, "Healing")."""
from __future__ import annotations

import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient

from server.procstats import is_alive, server_processes
from clients.stream import build_inputs, synthesize
from tests.e2e.conftest import DEFAULT_PRESET, server_and_gateway
from tests.e2e.test_metrics import scrape
from tests.waiting import wait_for

ENDED_WITHIN_S = 10.0  # "within a few seconds" of the kill, generous for two shared cores
REVIVE_S = 120.0  # a whole tritonserver started again by the server's keeper (its models loaded on two cores)
STREAM_S = 20.0  # each stream's audio: long enough to be running at the kill
LANE_CHUNKS = 250  # a 20 s stream's chunks, at most: every chunk of a stream that completes (fewer: it ended early)


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


@dataclass
class Ending:
    """How one client's stream ended, and when (monotonic seconds); `error` None: its final response came."""

    kind: str
    ended_at: float | None = None
    error: str | None = None
    chunks: list[int] = field(default_factory=list)


def gateway_stream(url: str, ending: Ending, started: threading.Event) -> None:
    body = {"model": DEFAULT_PRESET, "input": "A long story.", "voice": "tiny", "stream_format": "sse",
            "response_format": "pcm", "seed": 3, "max_audio_seconds": STREAM_S, "ignore_eos": True}
    request = urllib.request.Request(url + "/v1/audio/speech", data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            for line in response:
                if line.startswith(b"data: "):
                    event = json.loads(line[6:])
                    if event["type"] == "speech.audio.delta" and "chunk_index" in event:
                        ending.chunks.append(event["chunk_index"])
                        started.set()
                    elif event["type"] == "error":
                        ending.error = event["error"]["code"]
    except OSError as exc:
        ending.error = f"{type(exc).__name__}: {exc}"
    ending.ended_at = time.monotonic()


def raw_grpc_stream(url: str, ending: Ending, started: threading.Event) -> None:
    """Plain tritonclient, as a user of Triton writes it: a stream, one request, responses until the final one."""
    responses: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(url)
    client.start_stream(callback=lambda result, error: responses.put((result, error)), stream_timeout=100)
    client.async_stream_infer("vox_ensemble", build_inputs("A long story.", seed=4, max_audio_seconds=STREAM_S,
                                                           ignore_eos=True), enable_empty_final_response=True)
    while True:
        try:
            result, error = responses.get(timeout=100)
        except queue.Empty:
            ending.error = "no response for 100 s"
            break
        if error is not None:
            ending.error = str(error)
            break
        response = result.get_response()
        if result.as_numpy("chunk_index") is not None:
            ending.chunks.append(int(result.as_numpy("chunk_index")[0]))
            started.set()
        if response.parameters["triton_final_response"].bool_param:
            break
    ending.ended_at = time.monotonic()
    client.stop_stream()
    client.close()


def perf_analyzer_stream(url: str, folder: Path, ending: Ending, started: threading.Event) -> None:
    """NVIDIA's perf_analyzer sending one long streaming request (its own client, its own timeouts)."""
    data, intervals = folder / "input.json", folder / "intervals.txt"
    data.write_text(json.dumps({"data": [{"text": ["A long story."], "seed": [5], "max_audio_seconds": [STREAM_S],
                                          "ignore_eos": [True]}]}))
    intervals.write_text("1\n")
    command = [sys.executable, "-m", "server.cli", "perf-analyzer", "-m", "vox_ensemble", "-u", url, "-i", "grpc",
               "--streaming", "--input-data", str(data), "--request-intervals", str(intervals),
               "--request-count", "1", "--max-threads", "1"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    started.set()  # perf_analyzer shows nothing before its end: the server's live count says it runs
    try:
        output, _ = process.communicate(timeout=150)
    except subprocess.TimeoutExpired:
        process.kill()
        output = "(killed after 150 s) " + process.communicate()[0]
    ending.ended_at = time.monotonic()
    ending.error = None if process.returncode == 0 else f"exit {process.returncode}: {output[-500:]}"


def streams_beside_a_kill(srv, gateway, tmp_path: Path, model: str) -> tuple[float, list[Ending]]:
    """Start one stream of each client kind, kill `model`'s stub once all run; (the kill's time, the endings).

    One at a time, each once the ones before are live, the gateway's last: it acks as it reads, so it runs at the
    LM's full speed (a 20 s stream in about a second on two idle cores) while the other two, with no acks, go at
    the pace of playback; started first, it could end before perf_analyzer's process had even started."""
    runs = {"perf_analyzer": lambda e, s: perf_analyzer_stream(srv.grpc_url, tmp_path, e, s),
            "grpc": lambda e, s: raw_grpc_stream(srv.grpc_url, e, s),
            "gateway": lambda e, s: gateway_stream(gateway.url, e, s)}
    if model == "vox_ensemble":
        del runs["perf_analyzer"]  # see the module's docstring
    endings = [Ending(kind) for kind in runs]
    threads = []
    for live, (run, ending) in enumerate(zip(runs.values(), endings), start=1):
        started = threading.Event()
        threads.append(threading.Thread(target=run, args=(ending, started), daemon=True))
        threads[-1].start()
        assert started.wait(60), ending
        assert wait_for(lambda: scrape(srv)["voxlane_live_requests"] >= live, timeout_s=60, poll_s=0.05), \
            (ending, server_state(srv))
    killed_at = time.monotonic()
    os.kill(stub_pid(srv, model), signal.SIGKILL)
    for thread in threads:
        thread.join(150)
    return killed_at, endings


@pytest.mark.parametrize("model", ["speechlm_lm", "codec", "codec_urgent", "voice_encoder", "voice_registry",
                                   "vox_ensemble"])  # the router last: it takes the whole server down
def test_a_killed_stub_ends_no_stream_in_silence_for_any_client(watched, tmp_path, model):
    srv, gateway = watched
    assert wait_for(lambda: _speaks(srv.grpc_url), timeout_s=REVIVE_S, poll_s=0.5), server_state(srv)
    dead, revivals = stub_pid(srv, model), srv.revivals
    killed_at, endings = streams_beside_a_kill(srv, gateway, tmp_path, model)
    for ending in endings:
        assert ending.ended_at is not None, ending
        assert ending.chunks == list(range(len(ending.chunks))), ending  # in order, none lost
        if model in ("speechlm_lm", "vox_ensemble"):  # the streams cannot go on: each ends with an error, soon
            assert ending.error is not None and ending.ended_at - killed_at <= ENDED_WITHIN_S, (ending, killed_at)
        else:  # the other codec lane takes the chunks; the encoder and the registry serve no stream here
            assert ending.error is None, ending
    if model == "vox_ensemble":  # the whole server ended with it (its streams with it) and was started again
        assert wait_for(lambda: srv.revivals == revivals + 1, timeout_s=REVIVE_S, poll_s=0.5), server_state(srv)
    else:  # reloaded by the router
        assert wait_for(lambda: stub_pid(srv, model) not in (None, dead), timeout_s=60, poll_s=0.2), server_state(srv)
        assert srv.revivals == revivals
    assert wait_for(lambda: _speaks(srv.grpc_url), timeout_s=REVIVE_S, poll_s=0.5), server_state(srv)
    if model == "voice_registry":
        assert wait_for(lambda: _lists(gateway.url), timeout_s=30, poll_s=0.5)


def _speaks(url: str) -> bool:
    try:
        return synthesize(url, "Back.", seed=1, max_audio_seconds=0.4, ignore_eos=True).audio.size > 0
    except Exception:  # noqa: BLE001 - not yet: the server or its router is still loading
        return False


def _lists(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/v1/audio/voices", timeout=10) as response:
            return response.status == 200 and "data" in json.load(response)
    except OSError:
        return False


def test_a_killed_tritonserver_is_started_again_by_its_keeper(watched, caplog):
    """Last in this module: the whole server dies (as Triton 2.51 may when a stub dies holding a shared lock),
    and `Server`'s keeper starts it again on the same ports: the gateway in front serves again."""
    srv, gateway = watched
    assert wait_for(lambda: _speaks(srv.grpc_url), timeout_s=REVIVE_S, poll_s=0.5), server_state(srv)
    old, revivals = srv.process.process.pid, srv.revivals
    with caplog.at_level(logging.WARNING, logger="voxlane.serve"):
        os.kill(old, signal.SIGKILL)
        assert wait_for(lambda: srv.revivals == revivals + 1, timeout_s=REVIVE_S, poll_s=0.5), server_state(srv)
    assert "tritonserver exited with signal SIGKILL: starting it again" in caplog.text
    assert srv.process.process.pid != old and srv.is_serving() and stub_pid(srv, "vox_ensemble") is not None
    assert _speaks(srv.grpc_url)
    assert wait_for(lambda: _lists(gateway.url), timeout_s=30, poll_s=0.5)
