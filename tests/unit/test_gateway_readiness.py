"""What "ready" means to the gateway: the router, the LM lane and at least one codec lane ready."""
from __future__ import annotations

import asyncio

import pytest

from server.gateway import readiness


@pytest.mark.parametrize("not_ready, expected", [
    ((), True),
    (("codec",), True),  # a codec lane reloading: the other one serves
    (("codec_urgent",), True),
    (("codec", "codec_urgent"), False),
    (("speechlm_lm",), False),
    (("vox_ensemble",), False),
])
def test_a_server_can_serve_while_one_codec_lane_is_down(monkeypatch, not_ready, expected):
    class Client:
        def __init__(self, url):
            pass

        async def is_model_ready(self, model, client_timeout):
            return model not in not_ready

        async def close(self):
            pass

    monkeypatch.setattr(readiness.grpcaio, "InferenceServerClient", Client)
    assert asyncio.run(readiness.can_serve("s:1")) is expected
