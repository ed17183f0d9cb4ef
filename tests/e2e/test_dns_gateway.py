"""A gateway whose servers come from DNS (a real DNS server, Debian's dnsmasq, answering names from a hosts file the
test rewrites) and whose two models are learned from the servers themselves: streams run while one server joins and
another leaves, every stream completes, new streams reach the joiner and none the leaver; each model's requests
reach its servers. Then a real Prometheus (Debian's) scrapes the servers and the gateway, labelled as the chart's
ServiceMonitor labels them, and evaluates every Grafana panel's query and each of the chart's KEDA queries (both
signals) to non-empty results.

The servers share their ports on loopback addresses of their own (Linux routes all of 127/8 to `lo`), as pods of a
headless Service share theirs: a DNS name's addresses with one gRPC port."""
from __future__ import annotations

import json
import os
import pwd
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from server.compare import free_ports
from server.gateway.config import GatewayConfig
from server.gateway.server import GatewayProcess
from server.serve import ServeConfig, Server
from server.triton_launch import Exposure, Ports
from tests import dashboard
from tests.system_tools import system_tool, version
from tests.waiting import wait_for

QWEN, COSY = "qwen3-tts-tiny", "cosyvoice3-tiny"
QWEN_NAME, COSY_NAME = "qwen.voxlane.test", "cosy.voxlane.test"
LEAVER, JOINER, COSY_ADDRESS = "127.0.0.2", "127.0.0.3", "127.0.0.4"
# each stream's audio: 750 frames of 1920 samples at 24 kHz, more than the LM runs ahead of a client that reads
# nothing (`max_unread_audio_s`, 5 s) plus what the gateway's buffer and the sockets hold (a few MB of PCM), so the
# stream of a client that holds off reading stays live in the gateway however fast the machine makes its audio
SECONDS = 60.0
NAMESPACE = "tts"  # the chart's, as tests/unit/test_helm_scaling.py renders it: groups `qwen3` and `mine`


def shared_ports(addresses: tuple[str, ...]) -> Ports:
    """Three ports free on every address."""
    for _ in range(50):
        ports = free_ports(3)
        if all(_is_free(address, port) for address in addresses for port in ports):
            return Ports(http=ports[0], grpc=ports[1], metrics=ports[2])
    raise RuntimeError("no ports free on every address")


def _is_free(address: str, port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((address, port))
        except OSError:
            return False
    return True


class Dnsmasq:
    """dnsmasq answering the names of a hosts file it reads again on SIGHUP; the test's domain is local (a name not
    in the file is NXDOMAIN, as a cluster DNS answers a Service with no pods)."""

    def __init__(self, binary: str, directory: Path) -> None:
        self.hosts, self.port = directory / "hosts", free_ports(1)[0]
        self.hosts.write_text("")
        self.process = subprocess.Popen(
            [binary, "--keep-in-foreground", "--no-resolv", "--no-hosts", f"--addn-hosts={self.hosts}",
             "--local=/voxlane.test/", f"--port={self.port}", "--listen-address=127.0.0.1", "--bind-interfaces",
             "--log-facility=-", "--log-queries",
             f"--user={pwd.getpwuid(os.geteuid()).pw_name}"],  # as root it would read the hosts file as nobody
            stdout=(directory / "dnsmasq.log").open("wb"),
            stderr=subprocess.STDOUT)

    @property
    def server(self) -> str:
        return f"127.0.0.1:{self.port}"

    def set(self, records: dict[str, tuple[str, ...]]) -> None:
        self.hosts.write_text("".join(f"{address} {name}\n" for name, addresses in records.items()
                                      for address in addresses))
        self.process.send_signal(signal.SIGHUP)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


def start(preset: str, address: str, ports: Ports, tmp_path_factory) -> Server:
    log = tmp_path_factory.mktemp("triton") / "tritonserver.log"
    server = Server(ServeConfig(model=preset, ports=ports, exposure=Exposure(host=address)), log_path=log)
    try:
        server.start(timeout_s=240)
    except (RuntimeError, TimeoutError):
        print(log.read_text()[-5000:])
        raise
    return server


@pytest.fixture(scope="module")
def fleet(model_cache, tmp_path_factory):
    binary = system_tool("dnsmasq", "dnsmasq-base")
    if binary is None:
        pytest.skip("no dnsmasq (Debian's dnsmasq-base), and it could not be installed")
    ports = shared_ports((LEAVER, JOINER, COSY_ADDRESS))
    dns = Dnsmasq(binary, tmp_path_factory.mktemp("dnsmasq"))
    servers, gateway = {}, None
    try:
        for address, preset in ((LEAVER, QWEN), (JOINER, QWEN), (COSY_ADDRESS, COSY)):
            servers[address] = start(preset, address, ports, tmp_path_factory)
        dns.set({QWEN_NAME: (LEAVER,), COSY_NAME: (COSY_ADDRESS,)})
        config = GatewayConfig(tritons=(), triton_dns=(f"{QWEN_NAME}:{ports.grpc}", f"{COSY_NAME}:{ports.grpc}"),
                               dns_server=dns.server, dns_interval_s=0.5, triton_metrics_port=ports.metrics,
                               default_model=QWEN, port=free_ports(1)[0],
                               forget_after_s=600.0)  # the leaver's 60 s streams took 69 s on a loaded host, and
        # a gateway that forgot it a minute after it left had no count of it left to check
        gateway = GatewayProcess(config, log_path=tmp_path_factory.mktemp("gateway") / "gateway.log")
        gateway.wait_ready(60)
        print(f"dnsmasq: {version(binary)}")
        yield {"dns": dns, "gateway": gateway, "ports": ports, "servers": servers}
    finally:
        if gateway is not None:
            gateway.stop()
        for server in servers.values():
            server.stop(grace_s=0)
        dns.stop()


def health(fleet) -> dict[str, dict]:
    """The gateway's view of each server, by address."""
    with urllib.request.urlopen(fleet["gateway"].url + "/health", timeout=10) as response:
        return {s["url"].rpartition(":")[0]: s for s in json.load(response)["servers"]}


def speak(fleet, model: str, seconds: float = SECONDS, hold: threading.Event | None = None) -> bytes:
    """One streamed request's PCM; with `hold`, its first piece, then the rest once `hold` is set."""
    body = json.dumps({"model": model, "input": "Membership from DNS.", "voice": "alloy", "response_format": "pcm",
                       "seed": 1, "ignore_eos": True, "max_audio_seconds": seconds}).encode()
    request = urllib.request.Request(fleet["gateway"].url + "/v1/audio/speech", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        audio = bytearray(response.read(9600))  # the stream runs
        if hold is not None:
            assert hold.wait(60), "the test never let the held streams go on"
        while piece := response.read(1 << 16):
            audio += piece
    return bytes(audio)


def router_streams(fleet, address: str) -> float:
    """Streams the server's router started and sent audio of (its count of first-chunk times, `voxlane_ttfa_ms`)."""
    url = f"http://{address}:{fleet['ports'].metrics}/metrics"
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith("voxlane_ttfa_ms_count"))


def test_streams_run_while_one_server_joins_and_another_leaves(fleet):
    expected = int(SECONDS * 24000) * 2
    hold = threading.Event()  # the leaver's four clients read nothing until it has left: their streams stay live
    with ThreadPoolExecutor(10) as pool:
        before = [pool.submit(speak, fleet, QWEN, SECONDS, hold) for _ in range(4)]
        try:
            assert wait_for(lambda: health(fleet)[LEAVER]["live_streams"] == 4, timeout_s=30, poll_s=0.2)
            fleet["dns"].set({QWEN_NAME: (JOINER,), COSY_NAME: (COSY_ADDRESS,)})  # one joins, the other leaves
            assert wait_for(lambda: (lambda h: not h[LEAVER]["member"] and h[JOINER]["model"] == QWEN)(health(fleet)),
                            timeout_s=20, poll_s=0.2)
            assert health(fleet)[LEAVER]["live_streams"] == 4  # leaving DNS cut none of them
        finally:
            hold.set()
        # six: more than the leaver's four, so that a balancer that still counted it would give it some
        after = [pool.submit(speak, fleet, QWEN) for _ in range(6)]
        bodies = [f.result() for f in before + after]
    assert [len(b) for b in bodies] == [expected] * 10  # every stream whole
    servers = health(fleet)
    assert servers[LEAVER]["streams_started"] == 4 and servers[JOINER]["streams_started"] == 6
    assert servers[LEAVER]["live_streams"] == 0
    assert router_streams(fleet, LEAVER) == 4 and router_streams(fleet, JOINER) == 6  # as the servers count them


def test_each_model_s_requests_reach_its_servers(fleet):
    with urllib.request.urlopen(fleet["gateway"].url + "/v1/models", timeout=10) as response:
        listed = [m["id"] for m in json.load(response)["data"]]
    assert listed[:2] == [QWEN, COSY] and "tts-1" in listed
    started = {address: s["streams_started"] for address, s in health(fleet).items()}
    assert len(speak(fleet, COSY, seconds=0.8)) > 0
    assert len(speak(fleet, "tts-1", seconds=0.8)) == int(0.8 * 24000) * 2  # the default model: Qwen
    now = {address: s["streams_started"] for address, s in health(fleet).items()}
    assert now[COSY_ADDRESS] == started[COSY_ADDRESS] + 1 and now[JOINER] == started[JOINER] + 1
    with pytest.raises(urllib.error.HTTPError) as refused:
        speak(fleet, "orpheus-tiny", seconds=0.8)
    assert refused.value.code == 404


def autoscaler_queries() -> list[str]:
    """Every KEDA trigger's query the chart writes (each group's servers and the gateways), for both signals."""
    from tests.unit.test_helm_scaling import of_kind, render, values

    return [trigger["metadata"]["query"] for signal in ("streams", "busy")
            for scaled in of_kind(render(values("keda", signal=signal)), "ScaledObject").values()
            for trigger in scaled["spec"]["triggers"]]


class Prometheus:
    def __init__(self, binary: str, directory: Path, targets: dict[str, tuple[str, str]]) -> None:
        """`targets`: the chart's Service name (the `service` label its ServiceMonitor gives) -> (job, HOST:PORT)."""
        self.port = free_ports(1)[0]
        config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                  "scrape_configs": [{"job_name": job, "metrics_path": "/metrics", "static_configs": [
                      {"targets": [target], "labels": {"namespace": NAMESPACE, "service": service}}]}
                      for service, (job, target) in targets.items()]}
        (directory / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
        self.process = subprocess.Popen(
            [binary, f"--config.file={directory / 'prometheus.yml'}", f"--storage.tsdb.path={directory / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"], stdout=(directory / "prometheus.log").open("wb"),
            stderr=subprocess.STDOUT)

    def api(self, path: str, **params) -> dict:
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.load(response)["data"]

    def targets_up(self) -> bool:
        try:
            active = self.api("targets")["activeTargets"]
        except OSError:
            return False
        return bool(active) and all(t["health"] == "up" for t in active)

    def query(self, expr: str) -> list:
        return self.api("query", query=expr)["result"]

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(30)


def test_prometheus_evaluates_every_dashboard_query_and_the_autoscalers(fleet, tmp_path_factory):
    binary = system_tool("prometheus", "prometheus")
    if binary is None:
        pytest.skip("no prometheus (Debian's prometheus), and it could not be installed")
    metrics = fleet["ports"].metrics
    gateway = fleet["gateway"].url.removeprefix("http://")
    prometheus = Prometheus(binary, tmp_path_factory.mktemp("prometheus"),
                            {"vl-voxlane-qwen3-pods": ("triton-qwen3", f"{JOINER}:{metrics}"),
                             "vl-voxlane-mine-pods": ("triton-mine", f"{COSY_ADDRESS}:{metrics}"),
                             "vl-voxlane-gateway": ("gateway", gateway)})
    try:
        assert wait_for(prometheus.targets_up, timeout_s=30, poll_s=0.2)
        with ThreadPoolExecutor(2) as pool:  # traffic on both servers, and one error, between scrapes
            list(pool.map(lambda model: speak(fleet, model, seconds=1.6), (QWEN, COSY)))
        with pytest.raises(urllib.error.HTTPError):
            speak(fleet, "orpheus-tiny", seconds=0.8)
        time.sleep(3.5)  # three scrapes after it: every rate has two samples of every series
        queries = dashboard.queries(dashboard.load()) + autoscaler_queries()
        empty = [expr for expr in queries if not prometheus.query(expr)]
        print(f"prometheus: {version(binary)}; {len(queries)} queries")
    finally:
        prometheus.stop()
    assert not empty, f"queries with no result: {empty}"
