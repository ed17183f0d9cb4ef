"""Find the `tritonserver` shipped in the nvidia-pytriton wheel and run it.

The wheel carries the server, the Python backend and one backend stub per
Python version. The stub matching our interpreter must sit in
`backends/python/triton_python_backend_stub`, the wheel's bundled libraries must
be on the library path, and the stub takes its `sys.path` from the first
`python3` on `PATH`, so the venv's `bin/` goes first.
"""
from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from backend_python.stub_common import unloads


@dataclass(frozen=True)
class TritonInstall:
    root: Path  # .../site-packages/pytriton/tritonserver

    @property
    def binary(self) -> Path:
        return self.root / "bin" / "tritonserver"

    @property
    def backends(self) -> Path:
        return self.root / "backends"

    @property
    def libs(self) -> Path:
        return self.root.parent.parent / "nvidia_pytriton.libs"


def find_triton() -> TritonInstall:
    """Locate the server (`$TRITONSERVER`, else the wheel's) and put the right Python stub in place."""
    if os.environ.get("TRITONSERVER"):  # an unpacked copy of the wheel's layout elsewhere
        install = TritonInstall(Path(os.environ["TRITONSERVER"]).resolve().parent.parent)
    else:
        try:
            import pytriton
        except ImportError as exc:
            raise RuntimeError("nvidia-pytriton is not installed: run `make install`") from exc
        install = TritonInstall(Path(pytriton.__file__).parent / "tritonserver")
    if not install.binary.exists():
        raise RuntimeError(f"no tritonserver binary in {install.root}")
    _install_stub(install)
    return install


def _install_stub(install: TritonInstall) -> None:
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    source = install.root / "python_backend_stubs" / version / "triton_python_backend_stub"
    target = install.backends / "python" / "triton_python_backend_stub"
    if not source.exists():
        raise RuntimeError(f"the Triton wheel has no Python backend stub for Python {version}")
    if not target.exists() or target.stat().st_size != source.stat().st_size:
        shutil.copy2(source, target)
    for path in (install.binary, target):
        path.chmod(0o755)


# glibc's malloc raises its mmap threshold (up to 32 MB), and its trim threshold with it, each time it frees a
# block it had mmapped; from then on big blocks come from its arenas and stay there once freed. Under cloning
# tritonserver's private RSS grew that way (its live heap was flat: heaptrack). Fixed thresholds turn the raising
# off: blocks of 64 kB and more are unmapped when freed, and an arena gives back a free top over 128 kB. The
# measurements (2-3.5x less growth per cloned request; jemalloc and tcmalloc no better) are in docs/RELIABILITY.md,
# "Memory". Only tritonserver runs with them: Triton's Python backend starts each stub through `bash -c`, which
# first reads $BASH_ENV (server/stub_env.sh unsets them). The stubs keep glibc's own thresholds, with which they
# trim their heaps (backend_python/stub_common/heap.py): with the fixed ones, the urgent codec lane grew 17 MB in the
# soak test's minute (it shrank 5 MB without). An operator's own GLIBC_TUNABLES replaces all of this.
STUB_ENV = Path(__file__).with_name("stub_env.sh")  # what the stubs' `bash -c` reads first: no GLIBC_TUNABLES
MALLOC_TUNABLES = "glibc.malloc.mmap_threshold=65536:glibc.malloc.trim_threshold=131072"


def server_env(install: TritonInstall, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for `tritonserver`: venv first on PATH, wheel libs on LD_LIBRARY_PATH, malloc's fixed
    thresholds (MALLOC_TUNABLES) unless GLIBC_TUNABLES is set; VOXLANE_TRITON_ENV's pairs last."""
    env = dict(os.environ)
    if "GLIBC_TUNABLES" not in env:
        env.update(GLIBC_TUNABLES=MALLOC_TUNABLES, BASH_ENV=str(STUB_ENV))
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([venv_bin, env.get("PATH", "")])
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in (_libpython_dir(), str(install.libs), env.get("LD_LIBRARY_PATH", "")) if p)
    env.update(extra or {})
    env.update(_env_overrides(os.environ.get("VOXLANE_TRITON_ENV", "")))
    return env


def _env_overrides(spec: str) -> dict[str, str]:
    """`VOXLANE_TRITON_ENV`: whitespace-separated KEY=VALUE pairs set for `tritonserver` (and the stubs it
    starts) but not the calling process, e.g. an allocator to try: `LD_PRELOAD=/path/libjemalloc.so.2`."""
    pairs = dict(item.split("=", 1) for item in spec.split() if "=" in item)
    if len(pairs) != len(spec.split()):
        raise ValueError(f"VOXLANE_TRITON_ENV takes KEY=VALUE pairs, got {spec!r}")
    return pairs


def _libpython_dir() -> str:
    """The directory of our interpreter's own libpython.

    The stub links `libpython3.X.so`; without this the loader may pick a
    system Python of the same minor version whose C API differs from ours (its
    extension modules then fail with undefined symbols).
    """
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    ldlibrary = sysconfig.get_config_var("LDLIBRARY") or ""
    return libdir if libdir and (Path(libdir) / ldlibrary).exists() else ""


# gRPC request and response states tritonserver keeps for reuse (its default is 8 per handler). Each keeps the
# buffers of the largest request and response it ever carried, and a reference is megabytes (60 s at 48 kHz: 11.5 MB):
# under cloning with references of every length its private memory rose to 66-114 MB within a minute and kept 68 MB
# at rest; with none kept it moved within 13-25 MB and kept 13 MB (tiny Base preset, 4 minutes, docs/RELIABILITY.md,
# "Memory"). A state costs one allocation per stream without them: nothing beside a stream's model work.
GRPC_STATES_KEPT = 0
# How long tritonserver waits on SIGTERM for its models to unload before it exits anyway. A clean
# unload takes 1-4.5 s on 2 CPU cores (most of it the codec stubs' teardown); a model that can never
# finish unloading (the old instance of a lane whose stub was killed, a client stream whose state the
# gRPC frontend keeps) used to hold every stop for Triton's default 30 s. In-flight streams end within
# this bound too: the LM lane's unload ends them with LANE_DOWN ("the server is shutting down").
EXIT_TIMEOUT_S = 3
# A tritonserver still running this long after its exit timeout hangs in its own teardown: once it logged "Exit
# timeout expired. Exiting immediately." and lived on until the SIGKILL 17 s later (a fault storm's stop, after
# killed stubs). Its models had their exit timeout; `stop` kills it then, whatever the grace. With EXIT_TIMEOUT_S,
# the 5 s a stop may take: a loaded host's clean teardown can outlast the exit timeout by more than a second.
EXIT_HANG_S = 2.0
SHM_REGION = b"triton_python_backend_shm_region_"  # a stub's shared memory in /dev/shm, named on its command line
SHM_DIR = Path("/dev/shm")


def shm_prefix() -> str:
    """A region prefix of one server's own (Triton's, then a random tag): every stub it starts names its shared memory
    with it, so its stop finds them all, a stub's that died and was replaced too (Triton 2.51 never frees those)."""
    return f"{SHM_REGION.decode()}voxlane-{secrets.token_hex(4)}-"


@dataclass(frozen=True)
class Ports:
    http: int = 8000
    grpc: int = 8001
    metrics: int = 8002


LOOPBACK = "127.0.0.1"
ADMIN_KEY_HEADER = "voxlane-admin-key"  # the header Triton's restricted APIs check (gRPC metadata: lower case)
# what an open port must not offer: loading and unloading models, the repository's index, shared-memory
# registration, tracing and logging settings
RESTRICTED_APIS = ("model-repository", "shared-memory", "trace", "logging")
# The value Triton's restricted APIs are given to expect: a line break, which no HTTP or gRPC request can carry in a
# header (HTTP ends the header there, gRPC refuses the value), so they are closed to every caller. Triton takes their
# key only on its command line, which every local user reads in /proc/PID/cmdline: a real key there let anyone on
# the host unload models. Model control goes through `voice_registry` instead (protocol/admin.py).
CLOSED = "\n"


@dataclass(frozen=True)
class Exposure:
    """Where tritonserver listens and whether its control APIs are closed.

    `host`: the address its HTTP, gRPC and metrics ports bind (127.0.0.1: this machine only; 0.0.0.0:
    every interface). `admin_key`: the first admin key (`voxlane serve --admin-key`; the registry checks its hash).
    A server on a network, or given an admin key, closes Triton's RESTRICTED_APIS to every caller (CLOSED); on
    loopback without a key they stay open to local tools."""

    host: str = LOOPBACK
    admin_key: str | None = field(default=None, repr=False)

    @property
    def local_host(self) -> str:
        """The address this machine's own clients reach it at."""
        return LOOPBACK if self.host in ("0.0.0.0", "::", "localhost", LOOPBACK) else self.host

    @property
    def is_exposed(self) -> bool:
        return self.host not in (LOOPBACK, "localhost", "::1")

    @property
    def is_restricted(self) -> bool:
        """Whether Triton's control APIs are closed (model control then goes through `voice_registry`)."""
        return self.is_exposed or self.admin_key is not None

    def flags(self) -> list[str]:
        flags = [f"--http-address={self.host}", f"--grpc-address={self.host}", f"--metrics-address={self.host}"]
        if self.is_restricted:
            restricted = f"{','.join(RESTRICTED_APIS)}:{ADMIN_KEY_HEADER}={CLOSED}"
            flags += [f"--http-restricted-api={restricted}", f"--grpc-restricted-protocol={restricted}"]
        return flags


def server_command(install: TritonInstall, repository: Path, ports: Ports, exit_timeout_s: int = EXIT_TIMEOUT_S,
                   exposure: Exposure = Exposure(), region_prefix: str | None = None) -> list[str]:
    return [
        str(install.binary),
        f"--model-repository={repository}",
        f"--backend-directory={install.backends}",
        f"--http-port={ports.http}",
        f"--grpc-port={ports.grpc}",
        f"--metrics-port={ports.metrics}",
        *exposure.flags(),
        "--disable-auto-complete-config",
        # explicit control (every model loaded at start): lets the router unload a lane whose stub
        # died, so readiness reports it, and lets an operator load it again
        "--model-control-mode=explicit",
        "--load-model=*",
        "--exit-on-error=true",
        f"--exit-timeout-secs={exit_timeout_s}",
        "--log-verbose=0",
        f"--grpc-infer-allocation-pool-size={GRPC_STATES_KEPT}",
        *([f"--backend-config=python,shm-region-prefix-name={region_prefix}"] if region_prefix else []),
        *os.environ.get("VOXLANE_TRITON_ARGS", "").split(),  # extra server flags, e.g. for debugging
    ]


# Triton's log line for a model that could not load: `failed to load 'NAME' version N: Internal: WHY\n\nAt: …` (the
# Python backend's traceback follows WHY, its newlines written as "\n")
TRITON_STATUSES = ("Internal", "Invalid argument", "Not found", "Unavailable", "Unsupported", "Already exists",
                   "Unknown")  # the status word Triton puts before a load error's message
LOAD_FAILURE = re.compile(r"failed to load '([^']+)' version \d+: (?:(?:%s): )?(.*?)(?:\\n|\"?$)"
                          % "|".join(TRITON_STATUSES), re.MULTILINE)


def load_failures(log: str) -> list[str]:
    """"MODEL failed to load: WHY" for each model a tritonserver log says could not load (the last word per model)."""
    found = {name: why.strip() for name, why in LOAD_FAILURE.findall(log)}
    return [f"{name} failed to load: {why}" for name, why in found.items()]


class TritonProcess:
    """A running `tritonserver`; `stop()` sends SIGTERM, then SIGKILL after a grace period, and leaves
    nothing behind: no stub process, no stub shared memory (of the stubs it runs, and of those that died before),
    no folder of unload marks."""

    def __init__(self, install: TritonInstall, repository: Path, ports: Ports,
                 env: dict[str, str] | None = None, log_path: Path | None = None,
                 exposure: Exposure = Exposure(), append_log: bool = False) -> None:
        self.ports, self.host = ports, exposure.local_host
        self._log_path = Path(log_path) if log_path else None
        self._log = open(log_path, "ab" if append_log else "wb") if log_path else None
        self._log_start = self._log.tell() if self._log else 0  # this start's lines follow an appended log's
        self.region_prefix = shm_prefix()
        self.process = subprocess.Popen(
            server_command(install, repository, ports, exposure=exposure, region_prefix=self.region_prefix),
            env=server_env(install, env), stdout=self._log or None, stderr=subprocess.STDOUT if self._log else None,
            start_new_session=True)
        self._marks = unloads.folder(self.process.pid)  # named by its start time: read while it runs

    def is_ready(self) -> bool:
        url = f"http://{self.host}:{self.ports.http}/v2/health/ready"
        try:
            with urllib.request.urlopen(url, timeout=1.0) as response:
                return response.status == 200
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    def _own_log(self) -> str:
        """What this start wrote to the log (not an earlier start's, when it appends)."""
        with open(self._log_path, "rb") as log:
            log.seek(self._log_start)
            return log.read().decode(errors="replace")

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                failures = load_failures(self._own_log()) if self._log_path else []
                raise RuntimeError(f"tritonserver exited with code {self.process.returncode} before ready"
                                   + "".join(f"; {failure}" for failure in failures)
                                   + (f" (log: {self._log_path})" if self._log_path else ""))
            if self.is_ready():
                return
            time.sleep(0.2)
        raise TimeoutError(f"tritonserver not ready after {timeout_s:.0f} s")

    def stop(self, grace_s: float = 20.0) -> int:
        """SIGTERM; tritonserver exits within its exit timeout (EXIT_TIMEOUT_S), SIGKILL is the backstop, after
        `grace_s` or EXIT_HANG_S past the exit timeout, whichever comes first (`grace_s` = 0: SIGKILL at once; the
        stubs' shared memory is removed all the same)."""
        regions = stub_shm_regions(self.process.pid)
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM if grace_s > 0 else signal.SIGKILL)
            try:
                self.process.wait(min(grace_s, EXIT_TIMEOUT_S + EXIT_HANG_S))
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        _end_orphans(self.process.pid, regions)
        remove_regions(self.region_prefix)
        unloads.remove_marks(self._marks)
        if self._log:
            self._log.close()
        return self.process.returncode


def stub_shm_regions(server_pid: int) -> list[Path]:
    """The /dev/shm files of the stubs `server_pid` runs now (each stub's command line names its region)."""
    regions = []
    for entry in Path("/proc").iterdir():
        try:
            if not entry.name.isdigit() or os.getpgid(int(entry.name)) != server_pid:
                continue
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile
            continue
        regions += [SHM_DIR / arg.decode() for arg in argv if arg.startswith(SHM_REGION)]
    return regions


def remove_regions(prefix: str, shm_dir: Path = SHM_DIR) -> None:
    """Remove every shared-memory region named with `prefix`: a stopped server's, live stubs' and dead ones' alike."""
    for region in shm_dir.glob(prefix + "*"):
        region.unlink(missing_ok=True)


def _end_orphans(server_pid: int, regions: list[Path]) -> None:
    """A stub whose tritonserver exited on its exit timeout would linger until it notices; end it, and
    remove the shared memory that only a clean unload frees."""
    try:
        os.killpg(server_pid, signal.SIGKILL)  # the server's session: only its stubs are left in it
    except ProcessLookupError:
        pass
    for region in regions:
        region.unlink(missing_ok=True)
