"""Debian's programs some end-to-end tests run (a DNS server, Prometheus): found on PATH, else installed with apt-get
where this runs as root and apt-get works, else None (the test skips, naming what is missing). Never fails the run."""
from __future__ import annotations

import os
import shutil
import subprocess

APT_TIMEOUT_S = 300


def system_tool(binary: str, package: str) -> str | None:
    """The path of `binary`, installing Debian's `package` first where it is missing and that can be done."""
    found = shutil.which(binary) or shutil.which(binary, path="/usr/sbin:/usr/bin:/sbin")
    if found or os.geteuid() != 0 or not shutil.which("apt-get"):
        return found
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "install", "-y", "--no-install-recommends", package], ["apt-get", "update"],
                    ["apt-get", "install", "-y", "--no-install-recommends", package]):
        try:
            subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           timeout=APT_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if found := shutil.which(binary) or shutil.which(binary, path="/usr/sbin:/usr/bin:/sbin"):
            return found
    return None


def version(binary: str) -> str:
    """The first line `binary --version` prints (for a test's report)."""
    done = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10)
    return (done.stdout or done.stderr).splitlines()[0] if (done.stdout or done.stderr) else "?"
