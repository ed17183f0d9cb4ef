"""The serving modes on CPU: where each chunk is decoded, and the same audio whichever lane decodes it."""
from __future__ import annotations

import numpy as np
import pytest

from server.serve import ServeConfig, Server
from clients.stream import synthesize
from server.triton_launch import Ports
from tests.e2e.conftest import free_ports
from tests.e2e.test_streaming import TEXT

EXPECTED_LANES = {"timeshare": {"inline"}, "colocate": {"background"}, "partition": {"background"}}


@pytest.fixture(scope="module", params=sorted(EXPECTED_LANES))
def mode_server(request, model_cache, tmp_path_factory):
    http, grpc, metrics = free_ports(3)
    log = tmp_path_factory.mktemp(f"triton-{request.param}") / "tritonserver.log"
    server = Server(ServeConfig(mode=request.param, ports=Ports(http, grpc, metrics)), log_path=log)
    server.start(timeout_s=240)
    yield request.param, server
    server.stop(grace_s=0)


def test_mode_decides_the_lane_and_keeps_the_audio(mode_server, url):
    mode, server = mode_server
    result = synthesize(server.grpc_url, TEXT, seed=13, max_audio_seconds=2.0, ignore_eos=True)
    assert [c.index for c in result.chunks] == list(range(len(result.chunks)))
    assert {c.lane for c in result.chunks} == EXPECTED_LANES[mode]
    reference = synthesize(url, TEXT, seed=13, max_audio_seconds=2.0, ignore_eos=True)  # voxlane mode
    np.testing.assert_allclose(result.audio, reference.audio, rtol=0, atol=1e-5)
