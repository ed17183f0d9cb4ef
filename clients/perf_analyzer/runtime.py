"""Run NVIDIA's `perf_analyzer` from the `tritonclient[all]` wheel on any machine, a CPU-only one included.

The wheel puts the binary in the environment's `bin/` but not the two libraries it links that a plain
system lacks: `libb64.so.0d` and `libcudart.so.12`. The `nvidia-pytriton` wheel (the server we run) ships
both, renamed by auditwheel, so a directory of links under the environment gives them their linked names;
Debian's `libb64-0d` and the `nvidia-cuda-runtime-cu12` wheel are the fallbacks.
"""
from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

BINARY = "perf_analyzer"
LINK_DIR = Path(sys.prefix) / "lib" / "perf_analyzer-libs"


@dataclass(frozen=True)
class NeededLibrary:
    """A library `perf_analyzer` links, where to find it, and what to install when it is nowhere."""

    soname: str  # the name the binary asks for
    bundled_glob: str  # its auditwheel-renamed file in nvidia_pytriton.libs
    wheel_path: str  # its path inside site-packages when installed from its own wheel ('' if none)
    remedy: str


NEEDED = (
    NeededLibrary("libb64.so.0d", "libb64-*.so.0d", "", "apt-get install libb64-0d"),
    NeededLibrary("libcudart.so.12", "libcudart-*.so.12*", "nvidia/cuda_runtime/lib/libcudart.so.12",
                  "pip install nvidia-cuda-runtime-cu12"),
)


class PerfAnalyzerError(RuntimeError):
    """perf_analyzer cannot run here; the message says what to install."""


def find_binary() -> Path:
    """The wheel's `perf_analyzer` binary: moved under LINK_DIR once `install_wrapper` ran, else beside this
    interpreter."""
    for path in (LINK_DIR / BINARY, Path(sys.executable).parent / BINARY):
        if path.exists() and _is_elf(path):
            return path
    raise PerfAnalyzerError(f"no {BINARY} binary beside {sys.executable}: install tritonclient[all] (`make install`)")


WRAPPER = """#!/bin/sh
# VoxLane: the tritonclient wheel's perf_analyzer, with the libraries it links found (clients/perf_analyzer/runtime.py)
LD_LIBRARY_PATH="{link_dir}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}" exec "{binary}" "$@"
"""


def install_wrapper(bin_dir: Path | None = None, link_dir: Path = LINK_DIR) -> Path:
    """Make the environment's `bin/perf_analyzer` run as installed: the wheel's binary moves to `link_dir` and a
    shell script that finds its libraries takes its place (again after a reinstall of tritonclient put the
    binary back). Returns the script."""
    bin_dir = bin_dir or Path(sys.executable).parent
    link_libraries(link_dir)
    script, binary = bin_dir / BINARY, link_dir / BINARY
    if script.exists() and _is_elf(script):
        os.replace(script, binary)
    if not binary.exists():
        raise PerfAnalyzerError(f"no {BINARY} binary in {bin_dir}: install tritonclient[all] (`make install`)")
    script.write_text(WRAPPER.format(link_dir=link_dir, binary=binary))
    script.chmod(0o755)
    return script


def _is_elf(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def link_libraries(link_dir: Path = LINK_DIR, site_dirs: list[Path] | None = None) -> Path:
    """Make `link_dir` hold every needed library under its linked name; raise naming what is missing."""
    site_dirs = site_dirs if site_dirs is not None else _site_dirs()
    link_dir.mkdir(parents=True, exist_ok=True)
    missing = []
    for needed in NEEDED:
        source = _locate(needed, site_dirs)
        link = link_dir / needed.soname
        if source is None:
            if not _on_system(needed.soname):
                missing.append(needed)
            continue
        if not link.is_symlink() or link.resolve() != source.resolve():
            link.unlink(missing_ok=True)
            link.symlink_to(source)
    if missing:
        raise PerfAnalyzerError(f"{BINARY} needs " + "; ".join(
            f"{m.soname} (not found: {m.remedy})" for m in missing))
    return link_dir


def perf_analyzer_env(link_dir: Path) -> dict[str, str]:
    """This environment with `link_dir` first on the library path."""
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(link_dir), env.get("LD_LIBRARY_PATH", "")) if p)
    return env


def command(args: list[str]) -> tuple[list[str], dict[str, str]]:
    """The argv and environment that run `perf_analyzer ARGS`."""
    return [str(find_binary()), *args], perf_analyzer_env(link_libraries())


def version() -> str:
    """`perf_analyzer --version`'s line; raises PerfAnalyzerError when the binary cannot start."""
    argv, env = command(["--version"])
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise PerfAnalyzerError(f"{BINARY} --version failed ({done.returncode}): {done.stderr.strip()}")
    return (done.stdout + done.stderr).strip()  # 2.51 prints its version on stderr


def exec_perf_analyzer(args: list[str]) -> int:
    """Replace this process with `perf_analyzer ARGS` (its signals and exit code are the caller's)."""
    try:
        argv, env = command(args)
    except PerfAnalyzerError as exc:
        print(f"voxlane: perf-analyzer: {exc}", file=sys.stderr)
        return 2
    os.execve(argv[0], argv, env)
    return 0  # not reached


def _locate(needed: NeededLibrary, site_dirs: list[Path]) -> Path | None:
    for site in site_dirs:
        bundled = sorted((site / "nvidia_pytriton.libs").glob(needed.bundled_glob))
        if bundled:
            return bundled[0]
        if needed.wheel_path and (site / needed.wheel_path).exists():
            return site / needed.wheel_path
    return None


def _on_system(soname: str) -> bool:
    """Whether the system's loader already finds it (e.g. Debian's libb64-0d)."""
    return ctypes.util.find_library(soname.split(".so")[0].removeprefix("lib")) == soname


def _site_dirs() -> list[Path]:
    import site
    return [Path(p) for p in site.getsitepackages()]
