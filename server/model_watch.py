"""Ends a server whose router (`vox_ensemble`) died, so that every client's stream on it ends at once.

The router heals what runs behind it: the lanes, the voice encoder and the voice registry
(backend_python/stub_common/lane_health.py). Nothing inside Triton can heal the router itself, and nothing can end
the streams it held: each client stream waits for responses that belonged to the dead process, and Triton 2.51 keeps
it open until its client gives up (a direct `tritonclient` stream and perf_analyzer waited out their own 90 s
deadline; reloading the router does not end them, and the dead instance never finishes unloading).
`voxlane serve` runs this watch beside each tritonserver: every `period_s` it looks for the router's stub process
(server.procstats, from /proc); a router gone while Triton still says it is ready (what a dead stub looks like in
Triton 2.51; a router being reloaded, or unloaded by an operator, is not ready and is left alone) ends the whole
server (`on_router_dead`), which closes every client's stream at once with gRPC's UNAVAILABLE (503 `unavailable`
behind the gateway), and the server's keeper starts it again (server/serve.py).
"""
from __future__ import annotations

import logging
import threading
import urllib.error
import urllib.request
from typing import Callable

from server.procstats import ServerProcesses, is_alive
from protocol.models import ROUTER

log = logging.getLogger("voxlane.model_watch")


class ModelWatch:
    def __init__(self, http_url: str, server_pid: int, on_router_dead: Callable[[], None],
                 period_s: float = 0.5) -> None:
        """`on_router_dead()`: end the server (called once; the watch ends with it)."""
        self.http_url, self.server_pid, self.period_s = http_url, server_pid, period_s
        self.num_router_deaths = 0
        self._on_router_dead = on_router_dead
        self._processes = ServerProcesses(server_pid, (ROUTER,))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="model-watch", daemon=True)

    def start(self) -> "ModelWatch":
        self._thread.start()
        return self

    def stop(self) -> None:
        """Before the server stops: a router unloaded at shutdown is not dead."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            if not self._server_is_alive():
                return  # the server is gone (another one may serve these ports later: not ours to watch)
            if ROUTER not in self._stubs() and not self._stop.is_set() and self._is_ready(ROUTER):
                self.num_router_deaths += 1
                log.error("the %s process died: ending its server, whose streams it held (its keeper starts it "
                          "again)", ROUTER)
                self._on_router_dead()
                return

    # the server's side, a method each: a test's watch replaces these, never the module's functions (a live
    # server's own watch in the same process would call the replacements too)
    def _server_is_alive(self) -> bool:
        return is_alive(self.server_pid)

    def _stubs(self) -> dict[str, int]:
        """The server's processes by model name (tritonserver's own under its name)."""
        return self._processes()

    def _is_ready(self, model: str) -> bool:
        try:
            with urllib.request.urlopen(f"{self.http_url}/v2/models/{model}/ready", timeout=2) as response:
                return response.status == 200
        except (OSError, urllib.error.URLError):
            return False
