"""How long `tritonserver` takes to stop on SIGTERM, per case (a benchmark, not a test).

Each case starts a server (tiny preset, CPU), brings it into a state, sends SIGTERM and measures
until the process has exited (SIGKILL only after `--grace` seconds, past Triton's own exit timeout,
so a stop that hangs shows its full length):

- `idle`: right after start;
- `burst`: right after 12 concurrent streams (and refusals past the queue);
- `codec_killed`, `urgent_killed`, `lm_killed`: a lane's stub killed (SIGKILL) and reloaded by the router;
- `reloaded`: every lane unloaded and loaded again through the repository API;
- `in_flight`: four long streams running (each must end with a clear error).

    .venv/bin/python -m tools.stop_times [--cases burst,in_flight] [--repeat 3]
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from server.compare import free_ports
from server.serve import ServeConfig, Server
from clients.stream import StreamError, synthesize
from server.triton_launch import Ports
from protocol.models import CODEC, CODEC_URGENT, LM
from tools.procstats import server_processes
from tests.waiting import wait_for

LANES = (CODEC, CODEC_URGENT, LM)


def speak(url: str, i: int, seconds: float = 1.0) -> str:
    """One stream; its ending's reason ("done" when it completed)."""
    try:
        synthesize(url, f"Hello number {i}.", seed=i, max_audio_seconds=seconds, ignore_eos=True, timeout_s=120)
        return "done"
    except StreamError as exc:
        return f"{exc.ended.reason.value}: {exc.ended.message}"


def burst(server: Server, num: int = 12) -> list[str]:
    with ThreadPoolExecutor(num) as pool:
        return list(pool.map(lambda i: speak(server.grpc_url, i), range(num)))


def lane_is_up(server: Server, lane: str) -> bool:
    with urllib.request.urlopen(f"{server.metrics_url}", timeout=5) as response:
        text = response.read().decode()
    return f'voxlane_lane_up{{lane="{lane}"}} 1' in text


def kill_and_heal(server: Server, lane: str) -> None:
    burst(server, 4)
    os.kill(server_processes(server.process.process.pid)[lane], signal.SIGKILL)
    speak(server.grpc_url, 99)  # meets the dead lane (codec: fails over; LM: refused)
    if not wait_for(lambda: lane_is_up(server, lane) and server.process.is_ready(), 120, poll_s=0.2):
        raise RuntimeError(f"{lane} did not come back")
    burst(server, 4)


def reload_lanes(server: Server) -> None:
    burst(server, 4)
    base = f"http://127.0.0.1:{server.config.ports.http}/v2/repository/models"
    for lane in LANES:
        for action in ("unload", "load"):
            urllib.request.urlopen(urllib.request.Request(f"{base}/{lane}/{action}", data=b"", method="POST"),
                                   timeout=120).read()
            if action == "unload":
                wait_for(lambda: not server.process.is_ready(), 30, poll_s=0.1)
    if not wait_for(server.process.is_ready, 60, poll_s=0.2):
        raise RuntimeError("not ready after the reloads")
    burst(server, 4)


CASES = {
    "idle": lambda server: None,
    "burst": burst,
    "codec_killed": lambda server: kill_and_heal(server, CODEC),
    "urgent_killed": lambda server: kill_and_heal(server, CODEC_URGENT),
    "lm_killed": lambda server: kill_and_heal(server, LM),
    "reloaded": reload_lanes,
}


def timed_stop(server: Server, grace_s: float) -> tuple[float, bool]:
    """(seconds from SIGTERM to exit, whether SIGKILL was needed)."""
    process = server.process.process
    started = time.monotonic()
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(grace_s)
        return time.monotonic() - started, False
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        return time.monotonic() - started, True


def run_case(name: str, grace_s: float, log_dir: Path) -> dict:
    server = Server(ServeConfig(ports=Ports(*free_ports(3))), log_path=log_dir / f"{name}.log")
    server.start(timeout_s=240)
    try:
        endings: list[str] = []
        if name == "in_flight":
            threads = [threading.Thread(target=lambda i=i: endings.append(speak(server.grpc_url, i, 30.0)))
                       for i in range(4)]
            for thread in threads:
                thread.start()
            time.sleep(3.0)  # every stream is past its first chunk
        else:
            CASES[name](server)
        seconds, killed = timed_stop(server, grace_s)
        if name == "in_flight":
            for thread in threads:
                thread.join(30)
    finally:
        server.stop()
    return {"case": name, "stop_s": round(seconds, 2), "sigkill": killed, "endings": sorted(set(endings))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join([*CASES, "in_flight"]))
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--grace", type=float, default=40.0, help="seconds before SIGKILL")
    parser.add_argument("--log-dir", type=Path, default=Path(".cache/stop_times"))
    args = parser.parse_args()
    args.log_dir.mkdir(parents=True, exist_ok=True)
    for _ in range(args.repeat):
        for name in args.cases.split(","):
            print(json.dumps(run_case(name, args.grace, args.log_dir)), flush=True)


if __name__ == "__main__":
    main()
