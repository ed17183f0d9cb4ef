"""A real `tritonserver` on free ports, started once for the end-to-end tests.

`server`/`url` serve the default preset. `family` serves each preset of `FAMILY_PRESETS` in turn
(one server per family, the default preset reusing `server`); the streaming contract tests take
`family` and run once per model family, at that family's sample rate and frame rate. A new family
adds its tiny preset to the list.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from server.compare import free_ports
from server.gateway.config import GatewayConfig
from server.gateway.server import GatewayProcess
from server.serve import ServeConfig, Server
from server.triton_launch import Ports

DEFAULT_PRESET = "qwen3-tts-tiny"
FAMILY_PRESETS = ["qwen3-tts-tiny", "csm-tiny", "orpheus-tiny", "cosyvoice3-tiny", "flashtts-tiny",
                  "higgs-v3-tiny", "zonos-tiny", "voxtral-tiny", "tontaube-tiny"]


@dataclass(frozen=True)
class FamilyServer:
    """A running server of one family's tiny preset, and the facts the contract tests check against."""

    preset: str
    url: str
    num_codebooks: int  # codes per frame the LM lane sends (a cascade's: its first codebook's, before refinement)
    frame_rate: float  # frames per second
    sample_rate: int
    samples_per_frame: int
    voices: tuple[str, ...]
    languages: tuple[str, ...]  # what `language` may name besides "auto"
    supports_instructions: bool
    supports_text_first: bool  # `non_streaming_mode` true
    metrics_url: str = ""  # its Prometheus endpoint


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory) -> Path:
    """Tiny checkpoints are materialised here, as the server would in ~/.cache/voxlane."""
    path = Path(os.environ.get("VOXLANE_TEST_CACHE") or tmp_path_factory.mktemp("voxlane-cache"))
    os.environ["VOXLANE_CACHE"] = str(path)
    return path


def start_server(preset: str, tmp_path_factory, **settings) -> Server:
    """A server of `preset` on free ports; `settings` are other ServeConfig fields. The fixtures kill theirs at
    teardown (`stop(grace_s=0)`): a clean unload costs 3-4 s of a 2-core machine per server and is tested where it
    is the point (test_faults.py's stop with streams in flight, test_launch.py)."""
    http, grpc, metrics = free_ports(3)
    log = tmp_path_factory.mktemp("triton") / "tritonserver.log"
    srv = Server(ServeConfig(model=preset, ports=Ports(http=http, grpc=grpc, metrics=metrics), **settings),
                 log_path=log)
    try:
        srv.start(timeout_s=240)
    except (RuntimeError, TimeoutError):
        print(log.read_text()[-5000:])
        raise
    return srv


@pytest.fixture(scope="session")
def server(model_cache, tmp_path_factory) -> Server:
    srv = start_server(DEFAULT_PRESET, tmp_path_factory)
    yield srv
    srv.stop(grace_s=0)


@pytest.fixture(scope="session")
def url(server) -> str:
    return server.grpc_url


@pytest.fixture(scope="session", params=FAMILY_PRESETS)
def family(request, model_cache, tmp_path_factory) -> FamilyServer:
    """Session-scoped per preset: pytest groups the tests by preset, so one family server runs at a time."""
    preset = request.param
    if preset == DEFAULT_PRESET:
        yield family_facts(preset, request.getfixturevalue("server"))
        return
    srv = start_server(preset, tmp_path_factory)
    try:
        yield family_facts(preset, srv)
    finally:
        srv.stop(grace_s=0)


def family_facts(preset: str, server: Server) -> FamilyServer:
    """Read the shapes off the preset's own LM and codec (tiny: a moment on the CPU)."""
    from backend_python.models import registry

    spec = registry.resolve(preset)
    lm = registry.load_lm(spec, device="cpu", dtype="float32")
    codec = registry.load_codec(spec, device="cpu", dtype="float32")
    return FamilyServer(preset, server.grpc_url, lm.num_codebooks, lm.frame_rate, codec.sample_rate,
                        codec.samples_per_frame, lm.voices, lm.languages, lm.supports_instructions,
                        lm.supports_text_first, f"http://127.0.0.1:{server.config.ports.metrics}/metrics")


@contextmanager
def server_and_gateway(tmp_path_factory, server_settings: dict | None = None, **gateway_settings):
    """A server of the default preset with a gateway in front of it (`gateway_settings`: GatewayConfig fields),
    both stopped at the end: for a test module that kills or locks what it serves."""
    srv = start_server(DEFAULT_PRESET, tmp_path_factory, **(server_settings or {}))
    process = None
    try:
        process = GatewayProcess(GatewayConfig(tritons=(srv.grpc_url,), port=free_ports(1)[0], **gateway_settings),
                                 log_path=tmp_path_factory.mktemp("gateway") / "gateway.log")
        process.wait_ready(60)
        yield srv, process
    finally:
        if process is not None:
            process.stop()
        srv.stop(grace_s=0)


@pytest.fixture(scope="module")
def gateway(server, tmp_path_factory):
    """The OpenAI gateway in front of the default server (a test module may bring its own)."""
    config = GatewayConfig(tritons=(server.grpc_url,), port=free_ports(1)[0])
    process = GatewayProcess(config, log_path=tmp_path_factory.mktemp("gateway") / "gateway.log")
    process.wait_ready(60)
    yield process
    process.stop()
