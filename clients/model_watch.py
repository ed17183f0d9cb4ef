"""Heals the models nobody else watches: the router (`vox_ensemble`), the voice registry, and the voice encoder
when no stream meets it.

The router heals the lanes (backend_python/stub_common/lane_health.py), but nothing inside Triton heals the
router itself, a dead registry stub answered every call with 400 "Stub process … is not healthy", and the
router heals the encoder only when a cloning stream finds it dead (registers alone never did). The encoder is
left to the router for a grace period first, so the two healers rarely meet (when they do, a second load of
a loaded model is a no-op).
`voxlane serve` runs this watch beside each tritonserver: every `period_s` it looks for each watched
model's stub process (clients.procstats, from /proc); a model whose stub is gone while Triton still says it
is ready (what a dead stub looks like in Triton 2.51; a model being reloaded, or unloaded by an operator, is
not ready and is left alone) is unloaded and loaded again through Triton's repository API (with the admin key where it is restricted).
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

from clients.procstats import ServerProcesses, is_alive
from clients.triton_launch import ADMIN_KEY_HEADER
from protocol.models import ROUTER, VOICE_ENCODER, VOICE_REGISTRY

log = logging.getLogger("voxlane.model_watch")
WATCHED = {ROUTER: 0.0, VOICE_REGISTRY: 0.0, VOICE_ENCODER: 3.0}  # model -> seconds gone before this watch heals it
# the router stays unloaded this long before its load: every gateway's readiness poll (each 0.5 s) sees it
# unloaded, and ends the streams that were in flight on it (an unload and a load can take 0.3 s in all)
ROUTER_HOLD_S = 2.0
MAX_RETRY_GAP_S = 30.0  # a load that keeps failing is tried again after 1, 2, 4, … periods, at most this far apart


class ModelWatch:
    def __init__(self, http_url: str, server_pid: int, control_key: str | None = None,
                 models: dict[str, float] = WATCHED, period_s: float = 0.5, unload_wait_s: float = 30.0,
                 router_hold_s: float = ROUTER_HOLD_S) -> None:
        self.http_url, self.server_pid, self.control_key = http_url, server_pid, control_key
        self.models, self.period_s, self.unload_wait_s = models, period_s, unload_wait_s
        self.router_hold_s = router_hold_s
        self.restarts = {model: 0 for model in models}
        self._gone_since: dict[str, float] = {}
        self._owed: set[str] = set()  # unloaded by this watch, not yet loaded again: a failed load is tried again
        self._retry: dict[str, tuple[float, float]] = {}  # owed model -> (next try, gap after a failure there)
        self._processes = ServerProcesses(server_pid, models)
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
            if not self._server_is_alive():
                return  # the server is gone (another one may serve these ports later: not ours to heal)
            running, now = self._stubs(), time.monotonic()
            owed = sorted(self._owed)
            for model in owed:
                if not self._stop.is_set() and time.monotonic() >= self._retry.get(model, (0.0, 0.0))[0]:
                    self._load(model, time.monotonic())
            for model, grace_s in self.models.items():
                if model in owed:  # its new stub is looked for next round
                    continue
                if model in running:
                    self._gone_since.pop(model, None)
                elif (now - self._gone_since.setdefault(model, now) >= grace_s and not self._stop.is_set()
                      and self._is_ready(model)):  # not ready: someone is reloading it, or unloaded it on purpose
                    self._heal(model)
                    self._gone_since.pop(model, None)

    def _heal(self, model: str) -> None:
        started = time.monotonic()
        log.warning("the %s process died: reloading it", model)
        try:
            self._post(f"/v2/repository/models/{model}/unload")
        except (OSError, urllib.error.URLError) as exc:  # the server is stopping: its stub is still gone next round
            log.warning("unloading %s failed: %s", model, exc)
            return
        self._owed.add(model)
        deadline = time.monotonic() + self.unload_wait_s
        while self._is_ready(model) and time.monotonic() < deadline and not self._stop.is_set():
            time.sleep(0.1)  # in Triton 2.51 a load right after an unload can be lost (lane_health.py)
        if model == ROUTER:
            self._stop.wait(self.router_hold_s)
        if not self._stop.is_set():
            self._load(model, started)

    def _load(self, model: str, started: float) -> None:
        """Loads a model this watch unloaded; one whose load failed stays owed, and is tried again, each time after
        twice the gap before (nobody else would: Triton calls it not ready, which the watch otherwise leaves alone;
        a load that keeps failing is not hammered)."""
        try:
            self._post(f"/v2/repository/models/{model}/load")
        except (OSError, urllib.error.URLError) as exc:
            gap = min(MAX_RETRY_GAP_S, 2 * self._retry[model][1] if model in self._retry else self.period_s)
            self._retry[model] = (time.monotonic() + gap, gap)
            log.warning("loading %s failed, trying again in %.1f s: %s", model, gap, exc)
            return
        self._owed.discard(model)
        self._retry.pop(model, None)
        self.restarts[model] += 1
        log.warning("%s reloaded in %.1f s", model, time.monotonic() - started)

    # the server's side, a method each: a test's watch replaces these, never the module's functions (a live
    # server's own watch in the same process would call the replacements too)
    def _server_is_alive(self) -> bool:
        return is_alive(self.server_pid)

    def _stubs(self) -> dict[str, int]:
        """The server's processes by model name (tritonserver's own under its name)."""
        return self._processes()

    def unload(self, model: str, timeout_s: float) -> bool:
        """Ask Triton to unload `model` (this watch leaves it unloaded); whether the request went through."""
        try:
            self._post(f"/v2/repository/models/{model}/unload", timeout_s=timeout_s)
        except (OSError, urllib.error.URLError) as exc:
            log.warning("unloading %s failed: %s", model, exc)
            return False
        return True

    def _post(self, path: str, timeout_s: float = 120.0) -> None:
        headers = {ADMIN_KEY_HEADER: self.control_key} if self.control_key else {}
        request = urllib.request.Request(self.http_url + path, data=b"{}", method="POST", headers=headers)
        with urllib.request.urlopen(request, timeout=timeout_s):
            pass

    def _is_ready(self, model: str) -> bool:
        try:
            with urllib.request.urlopen(f"{self.http_url}/v2/models/{model}/ready", timeout=2) as response:
                return response.status == 200
        except (OSError, urllib.error.URLError):
            return False

