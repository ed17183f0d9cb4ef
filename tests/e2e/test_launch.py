"""The two ways to run the server: `voxlane serve`, and bare `tritonserver` on the committed repository."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from server.serve import REPOSITORY, START_ATTEMPTS
from clients.stream import synthesize
from server.triton_launch import Ports, TritonProcess, find_triton, stub_shm_regions
from backend_python.vox_ensemble.stub_process import is_alive
from tests.waiting import wait_for
from tools.procstats import server_processes
from tests.e2e.conftest import free_ports


def start_bare(ports: Ports, log: Path) -> TritonProcess:
    """A bare tritonserver on the committed repository, started again where a signal ended it before it was ready,
    as `voxlane serve` does (START_ATTEMPTS): Triton 2.51's Python backend can abort as its stubs start on a loaded
    host (`boost::interprocess::lock_exception`, upstream server#8882). A repository that cannot load exits with a
    code: that fails at once."""
    for attempt in range(1, START_ATTEMPTS + 1):
        server = TritonProcess(find_triton(), REPOSITORY, ports, log_path=log, append_log=attempt > 1)
        try:
            server.wait_ready(240)
            return server
        except RuntimeError:
            code = server.process.poll()
            server.stop()
            if code is None or code >= 0 or attempt == START_ATTEMPTS:
                raise


def test_bare_tritonserver_serves_the_committed_repository(model_cache, tmp_path):
    http, grpc, metrics = free_ports(3)
    server = start_bare(Ports(http, grpc, metrics), tmp_path / "log")
    try:
        result = synthesize(f"127.0.0.1:{grpc}", "Straight from the repository.", seed=1,
                            max_audio_seconds=0.8, ignore_eos=True)
        assert result.audio.size == 10 * 1920
        stubs, regions = server_processes(server.process.pid), stub_shm_regions(server.process.pid)
    finally:
        started = time.monotonic()
        code = server.stop()
        stop_s = time.monotonic() - started
    log = (tmp_path / "log").read_text()
    # a clean stop: every model unloaded (0), or the codec stubs' teardown outlasted the 3 s exit
    # timeout (1, Triton says so); never SIGKILL, within the 5 s, nothing left behind
    assert code == 0 or (code == 1 and "Exit timeout expired" in log), (code, log[-1500:])
    assert "successfully unloaded 'vox_ensemble'" in log and "successfully unloaded 'speechlm_lm'" in log
    assert stop_s <= 5.0, f"the stop took {stop_s:.1f} s"
    models = sorted(path.parent.name for path in REPOSITORY.glob("*/config.pbtxt"))
    assert sorted(set(stubs) - {"tritonserver"}) == models  # one stub per model of the repository
    assert len(regions) == len(models)  # each with its shared memory
    # no stub left running (a killed one is gone, or a zombie until init reaps it, within moments)
    assert wait_for(lambda: not any(is_alive(pid) for pid in stubs.values()), timeout_s=2.0)
    assert not any(region.exists() for region in regions)


def test_voxlane_serve_prints_ready_starts_a_killed_tritonserver_again_and_stops_on_sigint(model_cache):
    """`voxlane serve` outlives its tritonserver's death: its keeper starts it again. (The command once took the
    dead server, in the moment before its keeper had seen the exit, for the whole fleet gone, and quit.)"""
    http, grpc, metrics = free_ports(3)
    process = subprocess.Popen(
        [sys.executable, "-m", "server.cli", "serve", "--http-port", str(http), "--grpc-port", str(grpc),
         "--metrics-port", str(metrics), "--log-file", os.devnull],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"127.0.0.1:{grpc}"
    try:
        line = process.stdout.readline()
        assert "ready" in line, line
        assert synthesize(url, "Hello.", seed=1, max_audio_seconds=0.4).chunks is not None
        [killed] = processes_with_argument(f"--grpc-port={grpc}")
        os.kill(killed, signal.SIGKILL)
        assert wait_for(lambda: processes_with_argument(f"--grpc-port={grpc}") not in ([], [killed])
                        or process.poll() is not None, timeout_s=120)
        assert process.poll() is None, process.stdout.read()
        assert wait_for(lambda: is_ready(http), timeout_s=120)
        assert synthesize(url, "Hello again.", seed=1, max_audio_seconds=0.4).chunks is not None
        process.send_signal(signal.SIGINT)
        assert process.wait(60) == 0
        assert "stopped" in process.stdout.read()
    finally:
        if process.poll() is None:
            process.kill()
    time.sleep(0.5)
    assert not processes_with_argument(f"--grpc-port={grpc}"), "tritonserver outlived voxlane serve"


def test_voxlane_serve_names_a_model_that_cannot_load(model_cache, tmp_path):
    """A checkpoint whose config its model refuses: the command fails in one line naming the lane and the reason
    (no traceback), with the log's path."""
    from backend_python.models import registry
    checkpoint = tmp_path / "bad-heads"
    shutil.copytree(registry.resolve("qwen3-tts-tiny").checkpoint, checkpoint)
    config = json.loads((checkpoint / "config.json").read_text())
    config["talker_config"]["num_key_value_heads"] = 3  # 4 query heads
    (checkpoint / "config.json").write_text(json.dumps(config))
    http, grpc, metrics = free_ports(3)
    done = subprocess.run(
        [sys.executable, "-m", "server.cli", "serve", "--model", str(checkpoint), "--http-port", str(http),
         "--grpc-port", str(grpc), "--metrics-port", str(metrics), "--log-file", str(tmp_path / "triton.log")],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert ("speechlm_lm failed to load: ValueError: num_attention_heads 4 not a multiple of num_key_value_heads 3"
            in done.stderr and str(tmp_path / "triton.log") in done.stderr), done.stderr
    assert not processes_with_argument(f"--grpc-port={grpc}")


def is_ready(http_port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/v2/health/ready", timeout=2) as response:
            return response.status == 200
    except OSError:  # refused while it starts, or 503 while its models load
        return False


def processes_with_argument(argument: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and argument.encode() in (entry / "cmdline").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_only_tritonserver_runs_with_the_fixed_malloc_thresholds(server):
    """The stubs trim their own heaps with glibc's own thresholds (server/stub_env.sh through BASH_ENV)."""
    def tunables(pid: int) -> list[bytes]:
        return [e for e in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if e.startswith(b"GLIBC_TUNABLES=")]

    pid = server.process.process.pid
    stubs = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    assert tunables(pid) and len(stubs) >= 5
    assert all(not tunables(int(stub)) for stub in stubs)
