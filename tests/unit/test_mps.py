"""The MPS daemon's life cycle around tritonserver, with a stand-in `nvidia-cuda-mps-control`."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from server.mps import MpsDaemon, MpsError
from server.serve import ServeConfig, Server
from server.triton_launch import Ports

FAKE_CONTROL = """#!/bin/sh
# stand-in for nvidia-cuda-mps-control: -d opens the control pipe, "quit" on stdin closes it
echo "$@" >> "$CUDA_MPS_LOG_DIRECTORY/calls"
if [ "$1" = "-d" ]; then
  [ -n "$FAIL_START" ] && { echo "An instance of this daemon is already running" >&2; exit 1; }
  touch "$CUDA_MPS_PIPE_DIRECTORY/control"; exit 0
fi
read cmd; echo "$cmd" >> "$CUDA_MPS_LOG_DIRECTORY/calls"; rm -f "$CUDA_MPS_PIPE_DIRECTORY/control"
"""


@pytest.fixture
def fake_control(tmp_path, monkeypatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "nvidia-cuda-mps-control"
    script.write_text(FAKE_CONTROL)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return bin_dir


def calls(daemon: MpsDaemon) -> list[str]:
    return (daemon.log_dir / "calls").read_text().split()


def test_start_and_quit_use_our_own_directories(fake_control, tmp_path):
    daemon = MpsDaemon(tmp_path / "run")
    daemon.start()
    assert (daemon.pipe_dir / "control").exists()
    assert daemon.env == {"CUDA_MPS_PIPE_DIRECTORY": str(tmp_path / "run" / "mps-pipe"),
                          "CUDA_MPS_LOG_DIRECTORY": str(tmp_path / "run" / "mps-log")}
    daemon.stop()
    assert calls(daemon) == ["-d", "quit"]
    assert not (daemon.pipe_dir / "control").exists()


def test_failed_start_is_a_clear_error(fake_control, tmp_path, monkeypatch):
    monkeypatch.setenv("FAIL_START", "1")
    with pytest.raises(MpsError, match="already running"):
        MpsDaemon(tmp_path / "run").start()


def test_missing_control_binary_suggests_no_partition(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(MpsError, match="--partition none"):
        MpsDaemon(tmp_path / "run").start()


def test_server_quits_mps_when_tritonserver_fails_to_start(fake_control, tmp_path, monkeypatch):
    # on a machine without a GPU, KIND_GPU instances cannot load: tritonserver exits
    monkeypatch.setenv("VOXLANE_CACHE", str(tmp_path / "cache"))
    from tests.e2e.conftest import free_ports
    http, grpc, metrics = free_ports(3)
    server = Server(ServeConfig(device="cuda", ports=Ports(http, grpc, metrics)), run_dir=tmp_path / "run",
                    log_path=tmp_path / "triton.log")
    with pytest.raises(RuntimeError, match="exited"):
        server.start(timeout_s=120)
    assert calls(server.mps) == ["-d", "quit"]
    assert server.process.process.poll() is not None


def test_the_shell_entry_starts_and_stops_a_daemon(fake_control, tmp_path, capsys):
    from server.mps import main
    daemon = MpsDaemon(tmp_path / "run")
    assert main(["start", str(tmp_path / "run")]) == 0
    assert capsys.readouterr().out.split() == [f"{key}={value}" for key, value in daemon.env.items()]
    assert (daemon.pipe_dir / "control").exists()
    assert main(["stop", str(tmp_path / "run")]) == 0
    assert main(["stop", str(tmp_path / "run")]) == 0  # none listens any more: nothing to quit
    assert calls(daemon) == ["-d", "quit"]


def test_the_shell_entry_reports_a_failed_start(fake_control, tmp_path, monkeypatch, capsys):
    from server.mps import main
    monkeypatch.setenv("FAIL_START", "1")
    assert main(["start", str(tmp_path / "run")]) == 1
    assert "already running" in capsys.readouterr().err
