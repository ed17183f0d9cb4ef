"""Takes a lane model whose Python stub process died out of service and brings it back itself.

Triton 2.51 keeps reporting a model ready after its stub process has died, and every request to it
then fails (bls.py reads that error into LANE_DOWN). When a call fails that way, or the LM watch
finds the LM's stub gone, the lane is down at once: codec chunks go to the other codec lane
(codec_lanes.py), LM requests end as LANE_DOWN. A healer thread then reloads the model:

1. unload it (a load alone is a no-op: Triton sees the same config already loaded), and wait until
   its readiness says not ready: in Triton 2.51 a load that follows the unload at once turns into
   a reload that keeps reporting the dead model ready;
2. load it (`pb_utils.load_model`, which returns once the load finished), then check that it is
   ready and that a live stub process runs for it; else unload again and retry, after a backoff
   that doubles, up to `reload_attempts` times;
3. put it back in service.

Model control needs tritonserver's explicit mode (`--model-control-mode=explicit --load-model=*`,
what `voxlane serve` starts); without it, or once every attempt failed, the lane stays down until
an operator loads it (`voice_registry`'s `load_model` with an admin key, or `POST
/v2/repository/models/<model>/load` where Triton's repository API is open) or restarts the server, and the
errors and the log say so. While a lane is unloaded Triton's strict readiness
(`/v2/health/ready`) says not ready: for a codec lane that is the seconds of its reload.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable

from protocol.reasons import Ended, EndReason
from protocol.settings import read_settings

log = logging.getLogger("voxlane.router")
OPERATOR_CHECK_PERIOD_S = 1.0  # how often a lane left down asks whether an operator loaded it


@dataclass(frozen=True)
class HealPolicy:
    """How the router reloads a dead lane (model parameters `lane_reload_attempts`,
    `lane_reload_delay_s`, `lane_unload_wait_s`)."""

    reload_attempts: int = 5
    first_delay_s: float = 0.5  # before the first load; doubles after each failed attempt
    max_delay_s: float = 10.0
    unload_wait_s: float = 30.0  # how long to wait for readiness to show the unload
    poll_s: float = 0.2

    @classmethod
    def from_parameters(cls, params: dict[str, str]) -> "HealPolicy":
        return read_settings(cls, params, keys=_PARAMETER_KEYS, ignore_unknown=True)

    def delay_s(self, attempt: int) -> float:
        return min(self.max_delay_s, self.first_delay_s * 2 ** attempt)


_PARAMETER_KEYS = {"reload_attempts": "lane_reload_attempts", "first_delay_s": "lane_reload_delay_s",
                   "unload_wait_s": "lane_unload_wait_s"}


@dataclass(frozen=True)
class ModelControl:
    """The Python backend's model control calls, and whether a model's stub process runs."""

    unload: Callable[[str], None]
    load: Callable[[str], None]
    is_ready: Callable[[str], bool]
    has_live_stub: Callable[[str], bool]


class LaneHealth:
    def __init__(self, control: ModelControl, policy: HealPolicy = HealPolicy(),
                 on_change: Callable[[str, bool, bool], None] = lambda model, is_up, is_restart: None) -> None:
        """`on_change(model, is_up, is_restart)`: the lane went down or came back (the metrics); called
        once per change, never per chunk."""
        self._control, self._policy, self._on_change = control, policy, on_change
        self._lock = threading.Lock()
        self._down: dict[str, Ended] = {}
        self._generations: dict[str, int] = {}  # model -> times it came back: which process a call reached
        self._given_up: dict[str, float] = {}  # left to an operator: when readiness was last asked
        self._stopped = threading.Event()

    def unavailable(self, model: str) -> Ended | None:
        """Why `model` cannot serve now (LANE_DOWN), or None. No call to the server while it heals."""
        with self._lock:
            down, asked = self._down.get(model), self._given_up.get(model)
            is_due = asked is not None and time.monotonic() - asked >= OPERATOR_CHECK_PERIOD_S
            if is_due:
                self._given_up[model] = time.monotonic()
        if down is None or not is_due or not self._control.is_ready(model):
            return down
        log.warning("the %s lane was loaded again and serves", model)
        self._mark_up(model)
        return None

    def generation(self, model: str) -> int:
        """How many times `model` came back: a caller notes it before a call, for `on_dead`."""
        with self._lock:
            return self._generations.get(model, 0)

    def on_dead(self, model: str, detail: str, generation: int | None = None) -> Ended:
        """`model`'s stub died (`detail`: what showed it): take the lane out of service and start its
        reload, once per death; the ending of a stream that cannot go on without it. A call made before the
        lane came back (`generation`, noted before the call, is older) reached the process that died, not the
        one that serves now: it ends its stream, and the lane stays in service."""
        with self._lock:
            if generation is not None and generation != self._generations.get(model, 0):
                return Ended(EndReason.LANE_DOWN, f"{model} failed: {detail} (a call to its process that died; "
                                                  f"the lane was reloaded since)")
            is_new = model not in self._down
            if is_new:  # claimed: streams that fail on the same crash do not start a second healer
                self._down[model] = Ended(EndReason.LANE_DOWN,
                                          f"the {model} lane is down (its process died; it is being reloaded)")
        if is_new:
            log.error("the %s lane's stub process died (%s); reloading it", model, detail)
            self._on_change(model, False, False)
            threading.Thread(target=self._heal, args=(model,), name=f"voxlane-heal-{model}", daemon=True).start()
        return Ended(EndReason.LANE_DOWN, f"{model} failed: {detail} (its process died; the lane is being reloaded)")

    def on_unloaded(self, model: str, ended: Ended, generation: int | None = None) -> None:
        """Triton refused a call to `model` as a model it does not serve now (`ended`: an operator unloaded it, or
        the server is stopping): the lane is out of service, and its streams are refused at admission with
        `ended`, without being opened, until readiness shows it loaded again (asked every
        OPERATOR_CHECK_PERIOD_S). No reload: nothing died. A stop drains the streams that were live when it
        unloaded the LM; streams still arriving are then answered at once, never counted live. A call made before
        the lane came back (`generation`, as in `on_dead`) says nothing of the lane that serves now."""
        with self._lock:
            if model in self._down or (generation is not None and generation != self._generations.get(model, 0)):
                return
            self._down[model] = ended
            self._given_up[model] = time.monotonic()
        log.warning("%s is not served now (%s): its streams are refused until it is loaded again", model,
                    ended.message)
        self._on_change(model, False, False)

    def stop(self) -> None:
        """Stop healing (the server is shutting down)."""
        self._stopped.set()

    def _heal(self, model: str) -> None:
        for attempt in range(self._policy.reload_attempts):
            if not self._unloaded(model):  # no model control: readiness will never show a reload
                self._give_up(model, "it cannot be unloaded (no explicit model control)", can_show_reload=False)
                return
            if self._stopped.wait(self._policy.delay_s(attempt)):
                return
            try:
                self._control.load(model)
            except Exception as exc:
                log.error("loading %s failed (attempt %d): %s", model, attempt + 1, exc)
                continue
            if self._control.is_ready(model) and self._control.has_live_stub(model):
                log.warning("the %s lane was reloaded and serves again (attempt %d)", model, attempt + 1)
                self._mark_up(model, is_restart=True)
                return
            log.error("%s was loaded but does not serve (attempt %d)", model, attempt + 1)
        self._give_up(model, "reloading it failed", can_show_reload=True)

    def _unloaded(self, model: str) -> bool:
        """Unload `model` and wait until readiness shows it; False without explicit model control."""
        try:
            self._control.unload(model)
        except Exception as exc:
            log.error("cannot unload %s (%s): start tritonserver with --model-control-mode=explicit "
                      "--load-model=* so that the router can reload a dead lane", model, exc)
            return False
        deadline = time.monotonic() + self._policy.unload_wait_s
        while self._control.is_ready(model):
            if time.monotonic() > deadline or self._stopped.wait(self._policy.poll_s):
                log.error("%s still reports ready %.0f s after its unload", model, self._policy.unload_wait_s)
                return not self._stopped.is_set()
        return True

    def _give_up(self, model: str, why: str, can_show_reload: bool) -> None:
        """Leave the lane to an operator; `can_show_reload`: readiness will say when they loaded it."""
        log.error("the %s lane stays down: %s; load it again or restart the server", model, why)
        with self._lock:
            if can_show_reload:
                self._given_up[model] = time.monotonic()
            self._down[model] = Ended(
                EndReason.LANE_DOWN,
                f"the {model} lane is down: its process died and {why}; load it again (voice_registry's "
                f"load_model, or POST /v2/repository/models/{model}/load where open) or restart the server")

    def _mark_up(self, model: str, is_restart: bool = False) -> None:
        with self._lock:
            self._generations[model] = self._generations.get(model, 0) + 1
            self._down.pop(model, None)
            self._given_up.pop(model, None)
        self._on_change(model, True, is_restart)
