"""Takes a lane model whose Python stub process died out of service, so that readiness says so.

Triton 2.51 keeps reporting a model ready after its stub process has died, and
every request to it then fails with "Stub process '<model>_0_0' is not
healthy.". When a call fails that way, the router unloads the model: its
readiness (`/v2/models/<model>/ready`, and `/v2/health/ready` under strict
readiness) now says not ready, and requests that need the lane fail at once
with an error that says what to do. Loading it again
(`POST /v2/repository/models/<model>/load`) starts a fresh stub, and the lane
serves again. Unloading needs tritonserver's explicit model control
(`--model-control-mode=explicit --load-model=*`); without it the lane stays
down until the server restarts, and only the errors and the log say so.

The router does not reload the model itself: in Triton 2.51 a load that follows
the unload at once turns into a reload that keeps reporting the dead model ready.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Callable

log = logging.getLogger("voxlane.router")
UNHEALTHY = "is not healthy"  # Triton's error for a call to a model whose stub died


@dataclass(frozen=True)
class _Down:
    reason: str
    is_unloaded: bool  # False: no explicit model control, the dead model still looks ready


class LaneHealth:
    def __init__(self, unload: Callable[[str], None], is_ready: Callable[[str], bool]) -> None:
        """`unload(model)`, `is_ready(model)`: the Python backend's model control calls."""
        self._unload = unload
        self._is_ready = is_ready
        self._lock = threading.Lock()
        self._down: dict[str, _Down] = {}

    def unavailable(self, model: str) -> str | None:
        """Why `model` cannot serve now, or None (also once someone has loaded it again)."""
        with self._lock:
            down = self._down.get(model)
        if down is None:
            return None
        if down.is_unloaded and self._is_ready(model):
            log.warning("the %s lane was loaded again and serves", model)
            with self._lock:
                self._down.pop(model, None)
            return None
        return down.reason

    def on_error(self, model: str, message: str) -> str:
        """The error to send for a failed call to `model`; a dead stub takes the lane out of service."""
        if UNHEALTHY not in message:
            return f"{model} failed: {message}"
        with self._lock:
            is_new = model not in self._down
            if is_new:  # claimed: streams that fail on the same crash do not unload it again
                self._down[model] = _Down(f"the {model} lane is down (its process died)", False)
        if is_new:
            self._take_out(model, message)
        return f"{model} failed: {message} (its process died; the lane is out of service)"

    def _take_out(self, model: str, message: str) -> None:
        log.error("the %s lane's stub process died (%s); unloading it", model, message)
        try:
            self._unload(model)
        except Exception as exc:  # no explicit model control: readiness cannot show it
            log.error("cannot unload %s (%s): start tritonserver with --model-control-mode=explicit "
                      "--load-model=* so that readiness reports a dead lane", model, exc)
            return
        with self._lock:
            self._down[model] = _Down(
                f"the {model} lane is down: its process died and it was unloaded; load it again "
                f"(POST /v2/repository/models/{model}/load) or restart the server", True)
