"""`voxlane serve --replicas 2 --gateway-port P` on CPU: two servers, the gateway spreads streams over both."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest

from server.compare import free_ports, is_port_free
from server.fleet import PORT_STRIDE

EXTRA = {"seed": 2, "max_audio_seconds": 0.8, "ignore_eos": True}


def _free_base() -> int:
    """A base port with base, +1, +2 and the same + PORT_STRIDE free."""
    for _ in range(50):
        base = free_ports(1)[0]
        if base + PORT_STRIDE + 2 < 65536 and all(is_port_free(base + d) for d in (0, 1, 2, 10, 11, 12)):
            return base
    raise RuntimeError("no free port block")


@pytest.fixture(scope="module")
def fleet(model_cache, tmp_path_factory):
    base, gateway_port = _free_base(), free_ports(1)[0]
    log = tmp_path_factory.mktemp("fleet") / "triton.log"
    command = [sys.executable, "-m", "server.cli", "serve", "--replicas", "2", "--gateway-port", str(gateway_port),
               "--http-port", str(base), "--grpc-port", str(base + 1), "--metrics-port", str(base + 2),
               "--log-file", str(log)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines = _wait_for_line(process, "gateway ready", timeout_s=240)
    yield {"gateway": f"http://127.0.0.1:{gateway_port}", "metrics": [base + 2, base + 2 + PORT_STRIDE],
           "lines": lines, "process": process}
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        process.wait(60)


def _wait_for_line(process: subprocess.Popen, text: str, timeout_s: float) -> list[str]:
    lines, deadline = [], time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line and process.poll() is not None:
            raise RuntimeError("voxlane serve exited:\n" + "".join(lines))
        lines.append(line)
        if text in line:
            return lines
    raise TimeoutError("".join(lines))


def chunks_served(metrics_port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith("voxlane_chunks_total{"))


def speak(client: openai.OpenAI, i: int, seconds: float = 0.8) -> bytes:
    with client.audio.speech.with_streaming_response.create(
            model="tts-1", input=f"Replica test {i}.", voice="alloy", response_format="pcm",
            extra_body={**EXTRA, "max_audio_seconds": seconds}) as response:
        return response.read()


def test_two_servers_start_on_their_own_ports(fleet):
    ready = [line for line in fleet["lines"] if "voxlane: ready" in line]
    assert len(ready) == 2 and len({line.split("grpc ")[1].split(",")[0] for line in ready}) == 2


def test_streams_spread_over_both_servers_and_the_least_loaded_gets_the_next(fleet):
    client = openai.OpenAI(base_url=fleet["gateway"] + "/v1", api_key="unused", max_retries=0, timeout=120)
    before = [chunks_served(p) for p in fleet["metrics"]]
    with ThreadPoolExecutor(4) as pool:
        bodies = list(pool.map(lambda i: speak(client, i), range(4)))
    assert all(len(b) == 10 * 1920 * 2 for b in bodies)  # 0.8 s = 10 frames of 1920 int16 samples
    after = [chunks_served(p) for p in fleet["metrics"]]
    assert all(a > b for a, b in zip(after, before))  # both servers did work
    with ThreadPoolExecutor(1) as pool:
        long = pool.submit(speak, client, 9, 2.4)  # keeps one server busy
        assert _wait(lambda: sum(s["live_streams"] for s in _health(fleet)["servers"]) == 1)
        busy = [s["live_streams"] for s in _health(fleet)["servers"]].index(1)
        started_before = [s["streams_started"] for s in _health(fleet)["servers"]]
        speak(client, 10)
        started = [s["streams_started"] for s in _health(fleet)["servers"]]
        long.result()
    assert started[1 - busy] == started_before[1 - busy] + 1 and started[busy] == started_before[busy]


def test_sigterm_stops_the_servers_and_the_gateway(fleet):
    process = fleet["process"]
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    assert process.wait(60) == 0
    stop_s = time.monotonic() - started
    assert stop_s <= 5.0, f"voxlane serve took {stop_s:.1f} s to stop"  # the bound, not a benchmark
    with pytest.raises(OSError):
        urllib.request.urlopen(fleet["gateway"] + "/health", timeout=2)
    for port in fleet["metrics"]:  # both tritonservers are gone
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()


def _health(fleet) -> dict:
    return json.load(urllib.request.urlopen(fleet["gateway"] + "/health", timeout=5))


def _wait(predicate, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False
