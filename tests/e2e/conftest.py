"""A real `tritonserver` on free ports, started once for the end-to-end tests."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from clients.bench.compare import free_ports
from clients.serve import ServeConfig, Server
from clients.triton_launch import Ports


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory) -> Path:
    """Tiny checkpoints are materialised here, as the server would in ~/.cache/voxlane."""
    path = Path(os.environ.get("VOXLANE_TEST_CACHE") or tmp_path_factory.mktemp("voxlane-cache"))
    os.environ["VOXLANE_CACHE"] = str(path)
    return path


@pytest.fixture(scope="session")
def server(model_cache, tmp_path_factory) -> Server:
    http, grpc, metrics = free_ports(3)
    log = tmp_path_factory.mktemp("triton") / "tritonserver.log"
    srv = Server(ServeConfig(ports=Ports(http=http, grpc=grpc, metrics=metrics)), log_path=log)
    try:
        srv.start(timeout_s=240)
    except (RuntimeError, TimeoutError):
        print(log.read_text()[-5000:])
        raise
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def url(server) -> str:
    return server.grpc_url
