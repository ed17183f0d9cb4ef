"""The routing rule: which codec lane decodes a chunk.

In `voxlane` mode, chunk 0 is urgent; a chunk whose slack is below the margin
is urgent (strictly below: slack == margin goes to the background lane);
everything else goes to the background lane. Other modes have one lane only.

slack  = deadline - now - expected background latency at the batch size
margin = margin_floor_s + safety_factor * that same expected latency, or, with
         `margin_quantile` q: margin_floor_s + safety_factor * (q-quantile - expected),
         so that (safety 1) a chunk goes background only if the lane's q-quantile
         latency plus the floor fits before its deadline

With an `urgent_budget` N, a chunk of low slack that finds N chunks in flight
on the urgent lane goes to the background lane (`URGENT_FULL`): the urgent lane
stays short for first chunks, which are urgent whatever the budget.

While chunk 0 is still in flight the deadline is unknown, but playback cannot
start before `now`, so `now + offset(i)` is a lower bound on the deadline; the
rule is applied to the slack computed from that bound (`is_slack_bound`), which
errs towards urgency without sending every early chunk to the urgent lane.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum

from .config import SchedulerConfig
from .lanes import Lane
from .latency import LatencyEstimator
from .playback import PlaybackClock


class RouteReason(str, Enum):
    """Why a chunk took its lane (for logs and metrics)."""

    FIRST_CHUNK = "first_chunk"
    LOW_SLACK = "low_slack"
    SLACK_OK = "slack_ok"
    URGENT_FULL = "urgent_full"  # low slack, but the urgent lane's budget was used up
    MODE = "mode"  # the serving mode has only one lane


# every (lane, reason) pair `ChunkRouter.route` can give: the router's metrics count each
ROUTES = ((Lane.URGENT, RouteReason.FIRST_CHUNK), (Lane.URGENT, RouteReason.LOW_SLACK),
          (Lane.BACKGROUND, RouteReason.SLACK_OK), (Lane.BACKGROUND, RouteReason.URGENT_FULL),
          *((lane, RouteReason.MODE) for lane in Lane))


@dataclass(frozen=True)
class RouteDecision:
    """Lane for one chunk; `slack_s`/`margin_s` are None when the rule did not need them."""

    lane: Lane
    reason: RouteReason
    slack_s: float | None = None
    margin_s: float | None = None
    is_slack_bound: bool = False  # slack from a lower bound: chunk 0 still in flight


class ChunkRouter:
    """Applies the routing rule of `config.mode`; shared by all requests (stateless)."""

    def __init__(self, config: SchedulerConfig, estimator: LatencyEstimator) -> None:
        self._config = config
        self._estimator = estimator

    def margin(self, background_batch_size: int = 1) -> float:
        """Slack below which a chunk is urgent."""
        return self._margin_for(self._estimator.expected(Lane.BACKGROUND, background_batch_size),
                                background_batch_size)

    def route(self, clock: PlaybackClock, chunk_index: int, now: float,
              background_batch_size: int = 1, urgent_in_flight: int = 0) -> RouteDecision:
        """Pick the lane for chunk `chunk_index` of the request whose clock is `clock`.

        `background_batch_size` is the batch the chunk would join on the
        background lane, itself included; `urgent_in_flight` the chunks in
        flight on the urgent lane now (the budget's count). Durations of all
        earlier chunks must be known to the clock (`on_emitted` or `on_sent`).
        """
        lanes = self._config.mode.lanes
        if len(lanes) == 1:
            return RouteDecision(lanes[0], RouteReason.MODE)
        if chunk_index == 0:
            return RouteDecision(Lane.URGENT, RouteReason.FIRST_CHUNK)
        decision = self._route_by_slack(clock, chunk_index, now, background_batch_size)
        if decision.lane is Lane.URGENT and self._is_urgent_full(urgent_in_flight):
            return replace(decision, lane=Lane.BACKGROUND, reason=RouteReason.URGENT_FULL)
        return decision

    def _is_urgent_full(self, urgent_in_flight: int) -> bool:
        budget = self._config.urgent_budget
        return budget > 0 and urgent_in_flight >= budget

    def _route_by_slack(self, clock: PlaybackClock, chunk_index: int, now: float,
                        batch_size: int) -> RouteDecision:
        expected = self._estimator.expected(Lane.BACKGROUND, batch_size)
        deadline = clock.deadline(chunk_index)
        is_bound = deadline is None
        if deadline is None:
            deadline = now + clock.offset(chunk_index)
        slack = deadline - now - expected
        margin = self._margin_for(expected, batch_size)
        if slack < margin:
            return RouteDecision(Lane.URGENT, RouteReason.LOW_SLACK, slack, margin, is_bound)
        return RouteDecision(Lane.BACKGROUND, RouteReason.SLACK_OK, slack, margin, is_bound)

    def _margin_for(self, expected_latency: float, batch_size: int) -> float:
        config = self._config
        if config.margin_quantile is None:
            return config.margin_floor_s + config.safety_factor * expected_latency
        tail = self._estimator.quantile(Lane.BACKGROUND, batch_size, config.margin_quantile) - expected_latency
        return config.margin_floor_s + config.safety_factor * max(0.0, tail)
