"""Takes a lane model whose Python stub process died out of service, so that readiness says so.

Triton 2.51 keeps reporting a model ready after its stub process has died, and every request to it
then fails (bls.py reads that error into LANE_DOWN). When a call fails that way, or the LM watch
finds the LM's stub gone, the router unloads the model: its readiness
(`/v2/models/<model>/ready`, and `/v2/health/ready` under strict readiness) now says not ready, and
requests that need the lane end at once as LANE_DOWN with a message that says what to do. Loading
it again (`POST /v2/repository/models/<model>/load`) starts a fresh stub, and the lane serves again.
Unloading needs tritonserver's explicit model control (`--model-control-mode=explicit
--load-model=*`); without it the lane stays down until the server restarts, and only the errors
and the log say so.

The router does not reload the model itself: in Triton 2.51 a load that follows the unload at once
turns into a reload that keeps reporting the dead model ready.
"""
from __future__ import annotations

import logging
import threading
from typing import Callable

from protocol.reasons import Ended, EndReason

log = logging.getLogger("voxlane.router")


class LaneHealth:
    def __init__(self, unload: Callable[[str], None], is_ready: Callable[[str], bool]) -> None:
        """`unload(model)`, `is_ready(model)`: the Python backend's model control calls."""
        self._unload = unload
        self._is_ready = is_ready
        self._lock = threading.Lock()
        self._down: dict[str, Ended] = {}
        self._unloaded: set[str] = set()  # down and unloaded: readiness will show a reload

    def unavailable(self, model: str) -> Ended | None:
        """Why `model` cannot serve now (LANE_DOWN), or None (also once someone has loaded it again)."""
        with self._lock:
            down, is_unloaded = self._down.get(model), model in self._unloaded
        if down is None:
            return None
        if is_unloaded and self._is_ready(model):
            log.warning("the %s lane was loaded again and serves", model)
            with self._lock:
                self._down.pop(model, None)
                self._unloaded.discard(model)
            return None
        return down

    def on_dead(self, model: str, detail: str) -> Ended:
        """`model`'s stub died (`detail`: what showed it): take the lane out of service once; the
        ending of the stream that met it."""
        with self._lock:
            is_new = model not in self._down
            if is_new:  # claimed: streams that fail on the same crash do not unload it again
                self._down[model] = Ended(EndReason.LANE_DOWN, f"the {model} lane is down (its process died)")
        if is_new:
            self._take_out(model, detail)
        return Ended(EndReason.LANE_DOWN, f"{model} failed: {detail} (its process died; the lane is out of service)")

    def _take_out(self, model: str, detail: str) -> None:
        log.error("the %s lane's stub process died (%s); unloading it", model, detail)
        try:
            self._unload(model)
        except Exception as exc:  # no explicit model control: readiness cannot show it
            log.error("cannot unload %s (%s): start tritonserver with --model-control-mode=explicit "
                      "--load-model=* so that readiness reports a dead lane", model, exc)
            return
        with self._lock:
            self._unloaded.add(model)
            self._down[model] = Ended(
                EndReason.LANE_DOWN,
                f"the {model} lane is down: its process died and it was unloaded; load it again "
                f"(POST /v2/repository/models/{model}/load) or restart the server")
