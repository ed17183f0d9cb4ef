"""Triton's HTTP `generate_stream` endpoint (server-sent events) on the same router."""
from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest


def generate_stream(server, body: dict) -> list[dict]:
    url = f"http://127.0.0.1:{server.config.ports.http}/v2/models/vox_ensemble/generate_stream"
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        lines = response.read().decode().splitlines()
    return [json.loads(line[len("data:"):]) for line in lines if line.startswith("data:")]


def test_http_stream_carries_the_chunks_in_order(server):
    events = generate_stream(server, {"text": "Hello over HTTP.", "seed": 1, "max_audio_seconds": 0.8,
                                      "ignore_eos": True})
    assert [e["chunk_index"] for e in events] == list(range(len(events)))
    assert sum(len(e["audio"]) for e in events) == 10 * 1920
    assert {e["sample_rate"] for e in events} == {24000} and events[0]["lane"] == "urgent"


def test_http_bad_input_is_a_clear_error(server):
    with pytest.raises(urllib.error.HTTPError) as caught:
        generate_stream(server, {"text": "   "})
    assert caught.value.code == 400
    assert "empty or whitespace" in caught.value.read().decode()
