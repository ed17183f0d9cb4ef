"""The two ways to run the server: `voxlane serve`, and bare `tritonserver` on the committed repository."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from clients.serve import REPOSITORY
from clients.stream import synthesize
from clients.triton_launch import Ports, TritonProcess, find_triton
from tests.e2e.conftest import free_ports


def test_bare_tritonserver_serves_the_committed_repository(model_cache, tmp_path):
    http, grpc, metrics = free_ports(3)
    server = TritonProcess(find_triton(), REPOSITORY, Ports(http, grpc, metrics), log_path=tmp_path / "log")
    try:
        server.wait_ready(240)
        result = synthesize(f"127.0.0.1:{grpc}", "Straight from the repository.", seed=1,
                            max_audio_seconds=0.8, ignore_eos=True)
        assert result.audio.size == 10 * 1920
    finally:
        assert server.stop() == 0


def test_voxlane_serve_prints_ready_and_stops_on_sigint(model_cache):
    http, grpc, metrics = free_ports(3)
    process = subprocess.Popen(
        [sys.executable, "-m", "clients.cli", "serve", "--http-port", str(http), "--grpc-port", str(grpc),
         "--metrics-port", str(metrics), "--log-file", os.devnull],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = process.stdout.readline()
        assert "ready" in line, line
        assert synthesize(f"127.0.0.1:{grpc}", "Hello.", seed=1, max_audio_seconds=0.4).chunks is not None
        process.send_signal(signal.SIGINT)
        assert process.wait(60) == 0
        assert "stopped" in process.stdout.read()
    finally:
        if process.poll() is None:
            process.kill()
    time.sleep(0.5)
    assert not processes_with_argument(f"--grpc-port={grpc}"), "tritonserver outlived voxlane serve"


def processes_with_argument(argument: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and argument.encode() in (entry / "cmdline").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found
