"""`voxlane compare`: the same workload and rates against the server in each mode, one after another.

The headline is each mode's capacity divided by `timeshare`'s, measured in one run on one machine.
"""
from __future__ import annotations

import json
import random
import socket
from dataclasses import dataclass, replace
from pathlib import Path

from clients.bench.config import BenchConfig
from clients.bench.plot import plot_results
from clients.bench.plot_lanes import has_lanes, lanes_path, plot_lanes
from clients.bench.runner import run_bench
from clients.bench.summary import ATTAINMENT_TARGETS
from server.serve import ServeConfig, Server
from server.triton_launch import Ports
from scheduler import ServingMode

BASELINE = ServingMode.TIMESHARE.value


@dataclass(frozen=True)
class CompareConfig:
    bench: BenchConfig  # its url is replaced by each server's
    modes: tuple[str, ...] = (BASELINE, ServingMode.VOXLANE.value)
    model: str = ServeConfig.model
    device: str = ServeConfig.device
    start_timeout_s: float = 300.0
    codec_sm_pcts: tuple[int, ...] = ()  # partitioned modes once per codec share (LM gets the rest); () = defaults

    def __post_init__(self) -> None:
        if not self.modes:
            raise ValueError("--modes needs at least one mode")
        for mode in self.modes:
            ServeConfig(mode=mode)  # validates the name
        for pct in self.codec_sm_pcts:
            if not 1 <= pct <= 99:
                raise ValueError(f"--codec-sm-pcts must be in [1, 99], got {pct}")

    def runs(self) -> list[tuple[str, ServeConfig]]:
        """(label, server config) per run: a partitioned mode once per codec share, as `voxlane@c25`."""
        runs = []
        for mode in self.modes:
            base = ServeConfig(model=self.model, device=self.device, mode=mode)
            if not (self.codec_sm_pcts and base.is_partitioned):
                runs.append((mode, base))
                continue
            runs += [(f"{mode}@c{pct}", replace(base, codec_sm_pct=pct, lm_sm_pct=100 - pct))
                     for pct in self.codec_sm_pcts]
        return runs


def run_compare(config: CompareConfig, log=print) -> dict:
    """Serve and bench each mode in turn; write <out>/<mode>/results.json, compare.json and compare.png."""
    results, failures = {}, {}
    for label, serve in config.runs():
        try:
            results[label] = _bench_mode(config, label, serve, log)
        except (RuntimeError, TimeoutError) as exc:  # BenchError, a start-up failure: keep the other modes
            failures[label] = str(exc)
            log(f"compare: {label} failed: {exc}")
    report = compare_report(results)
    report["failed_modes"] = failures
    report["text_rate"] = config.bench.text_rate  # every mode's requests streamed their text at it (None: whole)
    out = config.bench.out
    out.mkdir(parents=True, exist_ok=True)
    (out / "compare.json").write_text(json.dumps(report, indent=1))
    if results:
        plot_results(list(results.values()), out / "compare.png")
        if has_lanes(list(results.values())):
            plot_lanes(list(results.values()), lanes_path(out / "compare.png"))
    log(format_report(report))
    return report


def _bench_mode(config: CompareConfig, label: str, serve: ServeConfig, log) -> dict:
    serve = replace(serve, ports=Ports(*free_ports(3)))
    out = config.bench.out / label
    out.mkdir(parents=True, exist_ok=True)
    log(f"compare: starting tritonserver for {label} (log: {out / 'tritonserver.log'})")
    with Server(serve, log_path=out / "tritonserver.log") as server:
        metrics_url = f"http://127.0.0.1:{serve.ports.metrics}/metrics"
        result = run_bench(replace(config.bench, url=server.grpc_url, out=out, metrics_url=metrics_url), log=log)
        if server.process.process.poll() is not None:
            raise RuntimeError(f"tritonserver exited during the run (see {out / 'tritonserver.log'})")
    result["label"] = label
    return result


def compare_report(results: dict[str, dict]) -> dict:
    """Capacities per mode and their ratio to the baseline's (None where the baseline's is 0 or unknown)."""
    report = {"baseline": BASELINE, "modes": {}}
    for mode, result in results.items():
        report["modes"][mode] = {"capacity": result["capacity"], "summaries": result["summaries"]}
    for target in (f"{t:.2f}" for t in ATTAINMENT_TARGETS):
        base = results.get(BASELINE, {}).get("capacity", {}).get(target, {}).get("rate")
        for mode, result in results.items():
            rate = result["capacity"][target]["rate"]
            ratio = round(rate / base, 3) if base and rate is not None else None
            report["modes"][mode].setdefault("ratio_to_baseline", {})[target] = ratio
    return report


def format_report(report: dict) -> str:
    lines = [f"{'mode':<16} {'cap@90%':>9} {'cap@99%':>9} {'ratio@90%':>10} {'ratio@99%':>10}"]
    for mode, row in report["modes"].items():
        cap, ratio = row["capacity"], row["ratio_to_baseline"]
        lines.append(f"{mode:<16} {_rate(cap['0.90']):>9} {_rate(cap['0.99']):>9} "
                     f"{_num(ratio['0.90']):>10} {_num(ratio['0.99']):>10}")
    return "\n".join(lines)


def _rate(cap: dict) -> str:
    if cap["rate"] is None:
        return "-"
    return (">=" if cap["is_lower_bound"] else "") + f"{cap['rate']:g}"


def _num(value) -> str:
    return "-" if value is None else f"{value:g}x"


EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_PORT = 10000


def free_ports(count: int) -> list[int]:
    """`count` distinct free TCP ports on the loopback interface, below the kernel's ephemeral range where there is
    room: a port from that range (the kernel's pick for `bind(0)`) may be taken by any outgoing connection's local
    end before the server that was given it binds it (a fleet's gateway binds a minute after its ports are chosen,
    while other tests open thousands of connections), and that server then fails to start."""
    low = _ephemeral_low()
    if low - LOWEST_PORT < 50 * count:
        return _kernel_ports(count)
    ports: list[int] = []
    pick = random.SystemRandom()
    for _ in range(200 * count):
        port = pick.randrange(LOWEST_PORT, low)
        if port not in ports and is_port_free(port):
            ports.append(port)
            if len(ports) == count:
                return ports
    return _kernel_ports(count)


def _ephemeral_low() -> int:
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return LOWEST_PORT  # not Linux: the kernel's picks


def is_port_free(port: int) -> bool:
    """Whether a TCP socket can bind `port` on the loopback interface now."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _kernel_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports
