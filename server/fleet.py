"""Several VoxLane servers on one host (`voxlane serve --gpus`, `--replicas`) and the gateway in front."""
from __future__ import annotations

import sysconfig
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from server.gateway.auth import Keys
from server.gateway.config import GatewayConfig
from server.gateway.limits import ClientCaps
from server.serve import ServeConfig, Server
from server.triton_launch import Ports

LAYOUTS = ("replicate", "disaggregate")
PORT_STRIDE = 10  # server i listens on the base ports + 10 * i


@dataclass(frozen=True)
class FleetConfig:
    """Several servers on one host and, optionally, the gateway in front of them.

    `replicate`: one whole VoxLane (its lanes, its MPS daemon) per GPU, or `replicas` of them on cpu.
    `disaggregate`: one server on two GPUs, the LM lane on the first and both codec lanes on the second.
    """

    server: ServeConfig  # the settings every server shares; its ports are the first server's
    gpus: tuple[str, ...] = ()  # physical GPU ids (--gpus 0,1)
    layout: str = "replicate"
    replicas: int = 1  # servers without --gpus (cpu)
    gateway_port: int | None = None
    gateway_host: str = "127.0.0.1"
    gateway_keys: Keys = field(default_factory=Keys)  # the gateway's API and admin keys (gateway/auth.py)
    served_model_names: tuple[str, ...] = ()  # more ids the gateway answers as the model (--served-model-name)
    gateway_caps: ClientCaps = field(default_factory=ClientCaps)  # what one client may hold in it (gateway/limits.py)
    gateway_read_timeout_s: float = GatewayConfig.read_timeout_s

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"--layout must be one of {', '.join(LAYOUTS)}, got {self.layout!r}")
        if self.gpus and self.server.device != "cuda":
            raise ValueError("--gpus needs --device cuda")
        if self.layout == "disaggregate" and len(self.gpus) != 2:
            raise ValueError("--layout disaggregate needs exactly two GPUs (--gpus A,B)")
        if self.replicas < 1 or (self.replicas > 1 and (self.gpus or self.server.device != "cpu")):
            raise ValueError("--replicas N is for --device cpu without --gpus (on GPUs: --gpus)")
        if len(set(self.gpus)) != len(self.gpus):
            raise ValueError(f"--gpus lists a GPU twice: {','.join(self.gpus)}")

    def server_configs(self) -> list[ServeConfig]:
        if self.layout == "disaggregate":
            return [replace(self.server, gpus=self.gpus, codec_gpu=1)]
        groups = [(gpu,) for gpu in self.gpus] or [()] * self.replicas
        return [replace(self.server, gpus=group, ports=_offset(self.server.ports, i)) for i, group in enumerate(groups)]


def _offset(ports: Ports, index: int) -> Ports:
    step = PORT_STRIDE * index
    return Ports(http=ports.http + step, grpc=ports.grpc + step, metrics=ports.metrics + step)


class Fleet:
    """The servers of a FleetConfig (started side by side) and the gateway process; a context manager."""

    def __init__(self, config: FleetConfig, log_path: Path | None = None) -> None:
        self.config = config
        configs = config.server_configs()
        self.servers = [Server(c, log_path=_numbered(log_path, i, len(configs))) for i, c in enumerate(configs)]
        self.gateway = None
        self._log_path = log_path

    def start(self, timeout_s: float = 300.0) -> "Fleet":
        # Python 3.11 fills sysconfig's cache lazily without a lock: a thread could read LIBDIR as None
        # and start tritonserver without our libpython first on the library path
        sysconfig.get_config_vars()
        try:
            with ThreadPoolExecutor(len(self.servers)) as pool:
                for started in [pool.submit(s.start, timeout_s) for s in self.servers]:
                    started.result()
            if self.config.gateway_port is not None:
                self._start_gateway(timeout_s)
        except BaseException:  # one failure stops everything already running
            self.stop()
            raise
        return self

    def gateway_config(self):
        """The gateway in front of these servers, with the ids it answers to besides the model's own."""
        return GatewayConfig(tritons=tuple(s.grpc_url for s in self.servers),
                             metrics_urls=tuple(s.metrics_url for s in self.servers),
                             host=self.config.gateway_host, port=self.config.gateway_port,
                             keys=self.config.gateway_keys, served_model_names=self.config.served_model_names,
                             client_caps=self.config.gateway_caps, read_timeout_s=self.config.gateway_read_timeout_s)

    def _start_gateway(self, timeout_s: float) -> None:
        from server.gateway.server import GatewayProcess
        self.gateway = GatewayProcess(self.gateway_config(), log_path=_numbered(self._log_path, "gateway", 2))
        self.gateway.wait_ready(timeout_s)

    def stop(self) -> None:
        """Stop the gateway and every server at once: each waits for its own process (at most ~4 s)."""
        stops = [server.stop for server in self.servers]
        if self.gateway is not None:
            stops.append(self.gateway.stop)
        with ThreadPoolExecutor(len(stops)) as pool:
            list(pool.map(lambda stop: stop(), stops))

    def is_running(self) -> bool:
        """Every server serves (or is being started again by its keeper) and the gateway runs."""
        return (all(s.is_serving() for s in self.servers)
                and (self.gateway is None or self.gateway.process.poll() is None))

    def __enter__(self) -> "Fleet":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _numbered(path: Path | None, tag, count: int) -> Path | None:
    """`triton.log` → `triton.1.log` for the second of several servers; one server keeps the name."""
    if path is None or count == 1:
        return path
    return path.with_name(f"{path.stem}.{tag}{path.suffix}")
