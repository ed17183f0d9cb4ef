"""The CUDA MPS control daemon that lets each lane run on its own share of the SMs.

`voxlane serve --device cuda` starts one daemon with its own pipe and log
directories (so it never touches another user's MPS), hands those directories
to `tritonserver` through the environment, and quits the daemon afterwards.
Each model process then sets `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` before CUDA
initialises. GPU settings (compute mode, clocks, MIG) are never changed: MPS
works in the Default compute mode.

Scripts that measure lanes outside `voxlane serve` start and stop the same daemon
from the shell:

    mps_env=$(python -m server.mps start DIR)   # prints the KEY=VALUE pairs its clients need
    env $mps_env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25 python -m server.microbench.codec ...
    python -m server.mps stop DIR
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

CONTROL = "nvidia-cuda-mps-control"


class MpsError(RuntimeError):
    """MPS could not start; the message says why and what to do."""


class MpsDaemon:
    def __init__(self, base_dir: Path, visible_devices: str | None = None) -> None:
        self.pipe_dir = base_dir / "mps-pipe"
        self.log_dir = base_dir / "mps-log"
        # the GPUs this daemon's MPS server drives; its clients see them renumbered from 0
        self.visible_devices = visible_devices
        self._running = False

    @property
    def env(self) -> dict[str, str]:
        """What every CUDA process of the server needs to find this daemon."""
        return {"CUDA_MPS_PIPE_DIRECTORY": str(self.pipe_dir), "CUDA_MPS_LOG_DIRECTORY": str(self.log_dir)}

    def start(self, timeout_s: float = 10.0) -> None:
        if shutil.which(CONTROL) is None:
            raise MpsError(f"{CONTROL} is not on PATH: install the NVIDIA driver utilities, "
                           f"or run with --partition none (no SM partition)")
        self.pipe_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        done = subprocess.run([CONTROL, "-d"], env=self._environ(), capture_output=True, text=True)
        if done.returncode != 0:
            raise MpsError(f"{CONTROL} -d failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}")
        self._running = True
        self._wait_for_pipe(timeout_s)

    def _wait_for_pipe(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if (self.pipe_dir / "control").exists():
                return
            time.sleep(0.05)
        self.stop()
        raise MpsError(f"the MPS daemon did not open its control pipe in {self.pipe_dir}; "
                       f"see {self.log_dir}/control.log")

    def stop(self) -> None:
        if not self._running:
            return
        self.quit()
        self._running = False

    def quit(self) -> None:
        """Quit the daemon behind these directories, whoever started it; nothing if none listens there."""
        if (self.pipe_dir / "control").exists():
            subprocess.run([CONTROL], input="quit\n", env=self._environ(), capture_output=True, text=True,
                           timeout=30)

    def _environ(self) -> dict[str, str]:
        pinned = {"CUDA_VISIBLE_DEVICES": self.visible_devices} if self.visible_devices is not None else {}
        return {**os.environ, **self.env, **pinned}


def main(argv: list[str] | None = None) -> int:
    """`python -m server.mps start|stop DIR`: a daemon for shell scripts, in DIR/mps-pipe and DIR/mps-log."""
    parser = argparse.ArgumentParser(prog="python -m server.mps", description=main.__doc__)
    parser.add_argument("action", choices=("start", "stop"))
    parser.add_argument("dir", type=Path, help="where the daemon's pipe and log directories live")
    args = parser.parse_args(argv)
    daemon = MpsDaemon(args.dir)
    try:
        if args.action == "start":
            daemon.start()
            print(" ".join(f"{key}={value}" for key, value in daemon.env.items()))  # for `env $mps_env CMD`
        else:
            daemon.quit()
    except MpsError as exc:
        print(f"server.mps: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
