"""Heals the models nobody else watches: the router (`vox_ensemble`) and the voice registry.

The router heals the lanes (backend_python/router/lane_health.py), but nothing inside Triton heals the
router itself, and a dead registry stub answered every call with 400 "Stub process … is not healthy".
`voxlane serve` runs this watch beside each tritonserver: every `period_s` it looks for each watched
model's stub process (tools.procstats, from /proc); a model whose stub was running and is gone is
unloaded and loaded again through Triton's repository API (with the admin key where it is restricted).
While it is down Triton refuses its requests with "is not healthy" and then "unknown model", which
`protocol.wire` reads as LANE_DOWN: 503 with `Retry-After` behind the gateway; once it is unloaded the
strict readiness says not ready, and the gateway ends the streams that were in flight on it (their
responses belonged to the dead process).
"""
from __future__ import annotations

import logging
import threading
import time
import urllib.error
import urllib.request

from clients.triton_launch import ADMIN_KEY_HEADER
from protocol.models import ROUTER, VOICE_REGISTRY
from clients.procstats import server_processes

log = logging.getLogger("voxlane.model_watch")
WATCHED = (ROUTER, VOICE_REGISTRY)


class ModelWatch:
    def __init__(self, http_url: str, server_pid: int, control_key: str | None = None,
                 models: tuple[str, ...] = WATCHED, period_s: float = 0.5, unload_wait_s: float = 30.0) -> None:
        self.http_url, self.server_pid, self.control_key = http_url, server_pid, control_key
        self.models, self.period_s, self.unload_wait_s = models, period_s, unload_wait_s
        self.restarts = {model: 0 for model in models}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="model-watch", daemon=True)

    def start(self) -> "ModelWatch":
        self._thread.start()
        return self

    def stop(self) -> None:
        """Before the server stops: a model unloaded at shutdown is not dead."""
        self._stop.set()
        self._thread.join(timeout=self.unload_wait_s + 5)

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            try:
                running = server_processes(self.server_pid)
            except OSError:
                return  # the server is gone
            for model in self.models:
                if model not in running and not self._stop.is_set():
                    self._heal(model)

    def _heal(self, model: str) -> None:
        started = time.monotonic()
        log.warning("the %s process died: reloading it", model)
        try:
            self._post(f"/v2/repository/models/{model}/unload")
            deadline = time.monotonic() + self.unload_wait_s
            while self._is_ready(model) and time.monotonic() < deadline and not self._stop.is_set():
                time.sleep(0.1)  # in Triton 2.51 a load right after an unload can be lost (lane_health.py)
            if self._stop.is_set():
                return
            self._post(f"/v2/repository/models/{model}/load")
        except (OSError, urllib.error.URLError) as exc:  # the server is stopping, or the load failed: next round
            log.warning("reloading %s failed: %s", model, exc)
            return
        self.restarts[model] += 1
        log.warning("%s reloaded in %.1f s", model, time.monotonic() - started)

    def _post(self, path: str) -> None:
        headers = {ADMIN_KEY_HEADER: self.control_key} if self.control_key else {}
        request = urllib.request.Request(self.http_url + path, data=b"{}", method="POST", headers=headers)
        with urllib.request.urlopen(request, timeout=120):
            pass

    def _is_ready(self, model: str) -> bool:
        try:
            with urllib.request.urlopen(f"{self.http_url}/v2/models/{model}/ready", timeout=2) as response:
                return response.status == 200
        except (OSError, urllib.error.URLError):
            return False
