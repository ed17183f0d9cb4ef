"""Running the gateway: in this process (`voxlane gateway`) or as a child process of `voxlane serve`."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from aiohttp import web

from server.gateway.app import build_app
from server.gateway.config import GatewayConfig
from server.gateway.service import Gateway


async def serve_gateway(config: GatewayConfig, on_ready=print) -> None:
    """Serve until SIGINT/SIGTERM; a client that disconnects cancels its handler (and so its Triton stream)."""
    gateway = Gateway(config)
    await gateway.start()
    # keepalive_timeout: aiohttp closes a connection whose request line and headers are not whole this long after it
    # opened or answered its last request (a slowloris client's); the body's own deadline is read_body's
    runner = web.AppRunner(build_app(gateway), handler_cancellation=True, access_log=None,
                           keepalive_timeout=config.read_timeout_s)
    await runner.setup()
    site = web.TCPSite(runner, config.host, config.port)
    await site.start()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    access = "open: no API key set" if config.keys.is_open else "API keys required"
    models = ", ".join(gateway.catalog.ids_by_model)
    on_ready(f"voxlane: gateway ready on http://{config.host}:{config.port} (model {models}, "
             f"servers {', '.join((*config.tritons, *config.triton_dns))}; {access})")
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
        await gateway.close()


def gateway_command(config: GatewayConfig) -> list[str]:
    command = [sys.executable, "-m", "server.cli", "gateway", "--host", config.host, "--port", str(config.port)]
    if config.tritons:
        command += ["--triton", ",".join(config.tritons)]
    if config.metrics_urls:
        command += ["--triton-metrics", ",".join(config.metrics_urls)]
    command += _dns_flags(config)
    for flag, value in (("--model-name", config.model_name), ("--default-model", config.default_model)):
        if value:
            command += [flag, value]
    for name in config.served_model_names:
        command += ["--served-model-name", name]
    if config.write_timeout_s != GatewayConfig.write_timeout_s:
        command += ["--write-timeout-s", f"{config.write_timeout_s:g}"]
    if config.read_timeout_s != GatewayConfig.read_timeout_s:
        command += ["--read-timeout-s", f"{config.read_timeout_s:g}"]
    caps = config.client_caps
    command += ["--max-streams-per-key", str(caps.max_streams_per_key), "--max-streams-per-address",
                str(caps.max_streams_per_address), "--max-client-bytes", str(caps.max_bytes)]
    return command


def _dns_flags(config: GatewayConfig) -> list[str]:
    if not config.triton_dns:
        return []
    flags = [f"--triton-dns={name}" for name in config.triton_dns]
    flags += ["--dns-interval-s", f"{config.dns_interval_s:g}", "--metrics-port", str(config.triton_metrics_port),
              "--max-servers", str(config.max_servers), "--forget-after-s", f"{config.forget_after_s:g}"]
    return flags + (["--dns-server", config.dns_server] if config.dns_server else [])


class GatewayProcess:
    """`voxlane gateway` as a child process; `stop()` sends SIGTERM, then SIGKILL after a grace period."""

    def __init__(self, config: GatewayConfig, log_path: Path | None = None) -> None:
        self.config, self.log_path = config, log_path
        self._log = open(log_path, "wb") if log_path else None
        self.process = subprocess.Popen(gateway_command(config), stdout=self._log, env={**os.environ, **config.keys.env()},
                                        stderr=subprocess.STDOUT if self._log else None)

    @property
    def url(self) -> str:
        return f"http://{self.config.host}:{self.config.port}"

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the gateway exited with code {self.process.returncode} before ready"
                                   + self._log_tail())
            if _is_healthy(self.url + "/health"):
                return
            time.sleep(0.2)
        raise TimeoutError(f"the gateway was not ready after {timeout_s:.0f} s")

    def _log_tail(self, chars: int = 2000) -> str:
        """The end of the gateway's log, for an error that says why it exited ("" where it has none)."""
        if self.log_path is None:
            return ""
        try:
            return ":\n" + Path(self.log_path).read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self, grace_s: float = 10.0) -> int:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self._log:
            self._log.close()
        return self.process.returncode


def _is_healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2.0) as response:
            return json.load(response).get("status") == "ok"
    except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
        return False
