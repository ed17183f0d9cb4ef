"""SIGTERM after a burst of streams and refusals: tritonserver unloads every model and exits by
itself, not by the SIGKILL that follows the grace period (which leaves its shared memory behind)."""
from __future__ import annotations

import signal
from concurrent.futures import ThreadPoolExecutor

from clients.bench.compare import free_ports
from clients.serve import ServeConfig, Server
from clients.stream import StreamError, synthesize
from clients.triton_launch import Ports


def speak(url: str, i: int) -> str:
    try:
        synthesize(url, f"Hello number {i}.", seed=i, max_audio_seconds=1.0, ignore_eos=True)
        return "done"
    except StreamError as exc:
        return "overloaded" if "overloaded" in str(exc) else str(exc)


def test_server_exits_cleanly_on_sigterm_after_a_burst(model_cache, tmp_path):
    log = tmp_path / "tritonserver.log"
    server = Server(ServeConfig(ports=Ports(*free_ports(3)), max_slots=2, max_queued=2), log_path=log)
    server.start(timeout_s=240)
    try:
        with ThreadPoolExecutor(10) as pool:
            outcomes = list(pool.map(lambda i: speak(server.grpc_url, i), range(10)))
    finally:
        server.stop()
    assert set(outcomes) == {"done", "overloaded"}, outcomes  # both paths ran before the stop
    returncode = server.process.process.returncode
    assert returncode != -signal.SIGKILL, f"tritonserver needed SIGKILL; its log ends: {log.read_text()[-1500:]}"
    assert "successfully unloaded 'vox_ensemble'" in log.read_text()
