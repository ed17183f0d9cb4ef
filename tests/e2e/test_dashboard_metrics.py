"""Every series the Grafana dashboard queries is on a running server's or gateway's /metrics."""
from __future__ import annotations

import re
import urllib.error
import urllib.request

import pytest

from clients.stream import synthesize
from tests import dashboard

SERIES = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})? ", re.MULTILINE)


def _series(url: str) -> set[str]:
    return set(SERIES.findall(urllib.request.urlopen(url, timeout=5).read().decode()))


def _speak_through_the_gateway(gateway) -> None:
    """One stream (chunks, a write time) and one bad request (an error status) through the gateway."""
    body = b'{"model": "tts-1", "input": "Metrics.", "voice": "tiny", "response_format": "pcm", "seed": 1, ' \
           b'"max_audio_seconds": 0.5}'
    request = urllib.request.Request(gateway.url + "/v1/audio/speech", data=body,
                                     headers={"Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=60).read()
    bad = urllib.request.Request(gateway.url + "/v1/audio/speech", data=b'{"input": ""}',
                                 headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(bad, timeout=10)


def test_every_dashboard_metric_exists_on_a_running_server(server, url, gateway):
    synthesize(url, "The dashboard reads this.", seed=3, max_audio_seconds=1.6, ignore_eos=True)
    _speak_through_the_gateway(gateway)
    served = _series(f"http://127.0.0.1:{server.config.ports.metrics}/metrics") | _series(gateway.url + "/metrics")
    queried = dashboard.metric_names(dashboard.queries(dashboard.load()))
    missing = queried - served - dashboard.PROMETHEUS_SERIES
    assert not missing, f"the dashboard queries series no server exports: {sorted(missing)}"
