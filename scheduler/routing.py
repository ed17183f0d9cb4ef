"""The routing rule: which codec lane decodes a chunk.

In `voxlane` mode, chunk 0 is urgent; a chunk whose slack is below the margin
is urgent (strictly below: slack == margin goes to the background lane);
everything else goes to the background lane. Other modes have one lane only.

slack  = deadline - now - expected background latency at the batch size
margin = margin_floor_s + safety_factor * that same expected latency, or, with
         `margin_quantile` q: margin_floor_s + safety_factor * (q-quantile - expected),
         so that (safety 1) a chunk goes background only if the lane's q-quantile
         latency plus the floor fits before its deadline

A cascade's chunk that needs a refinement call first (`refine_batch_size` given)
takes the background refinement lane before the background codec: its expected
latency is the sum of both lanes' estimates (each at the batch the chunk would
join there), and its tail the sum of both lanes' tails.

With an `urgent_budget` N, a chunk of low slack that finds N calls in flight
on the urgent lane (the caller counts the urgent codec's and the urgent
refiner's: both run on the whole GPU) goes to the background lane
(`URGENT_FULL`): the urgent lane stays short for first chunks, which are urgent
whatever the budget.

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


_Stage = tuple[LatencyEstimator, int]  # one background call a chunk takes: its lane's estimate, the batch it joins


class ChunkRouter:
    """Applies the routing rule of `config.mode`; shared by all requests (stateless).

    `estimator` holds the codec lanes' call times; `refiner_estimator` a cascade's refinement lanes' (None: the
    server refines nothing, and no chunk may ask for a refinement)."""

    def __init__(self, config: SchedulerConfig, estimator: LatencyEstimator,
                 refiner_estimator: LatencyEstimator | None = None) -> None:
        self._config = config
        self._estimator = estimator
        self._refiner_estimator = refiner_estimator

    def margin(self, background_batch_size: int = 1, refine_batch_size: int | None = None) -> float:
        """Slack below which a chunk is urgent."""
        stages = self._background_stages(background_batch_size, refine_batch_size)
        return self._margin_for(stages, _expected(stages))

    def route(self, clock: PlaybackClock, chunk_index: int, now: float,
              background_batch_size: int = 1, urgent_in_flight: int = 0,
              refine_batch_size: int | None = None) -> RouteDecision:
        """Pick the lane for chunk `chunk_index` of the request whose clock is `clock`.

        `background_batch_size` is the batch the chunk would join on the
        background lane, itself included; `urgent_in_flight` the calls in
        flight on the urgent lane now (the budget's count); `refine_batch_size`
        the batch it would join on the background refinement lane, for a
        cascade's chunk that needs a refinement call (None: it needs none).
        Durations of all earlier chunks must be known to the clock (`on_emitted` or `on_sent`).
        """
        lanes = self._config.mode.lanes
        if len(lanes) == 1:
            return RouteDecision(lanes[0], RouteReason.MODE)
        if chunk_index == 0:
            return RouteDecision(Lane.URGENT, RouteReason.FIRST_CHUNK)
        stages = self._background_stages(background_batch_size, refine_batch_size)
        decision = self._route_by_slack(clock, chunk_index, now, stages)
        if decision.lane is Lane.URGENT and self._is_urgent_full(urgent_in_flight):
            return replace(decision, lane=Lane.BACKGROUND, reason=RouteReason.URGENT_FULL)
        return decision

    def _is_urgent_full(self, urgent_in_flight: int) -> bool:
        budget = self._config.urgent_budget
        return budget > 0 and urgent_in_flight >= budget

    def _background_stages(self, batch_size: int, refine_batch_size: int | None) -> list[_Stage]:
        """The background calls a chunk takes: a refinement first where it needs one, then its decode."""
        stages = [(self._estimator, batch_size)]
        if refine_batch_size is not None:
            if self._refiner_estimator is None:
                raise ValueError("a chunk asked for a refinement from a router that has no refinement estimate")
            stages.insert(0, (self._refiner_estimator, refine_batch_size))
        return stages

    def _route_by_slack(self, clock: PlaybackClock, chunk_index: int, now: float,
                        stages: list[_Stage]) -> RouteDecision:
        expected = _expected(stages)
        deadline = clock.deadline(chunk_index)
        is_bound = deadline is None
        if deadline is None:
            deadline = now + clock.offset(chunk_index)
        slack = deadline - now - expected
        margin = self._margin_for(stages, expected)
        if slack < margin:
            return RouteDecision(Lane.URGENT, RouteReason.LOW_SLACK, slack, margin, is_bound)
        return RouteDecision(Lane.BACKGROUND, RouteReason.SLACK_OK, slack, margin, is_bound)

    def _margin_for(self, stages: list[_Stage], expected_latency: float) -> float:
        config = self._config
        if config.margin_quantile is None:
            return config.margin_floor_s + config.safety_factor * expected_latency
        tail = sum(max(0.0, estimator.quantile(Lane.BACKGROUND, size, config.margin_quantile)
                       - estimator.expected(Lane.BACKGROUND, size)) for estimator, size in stages)
        return config.margin_floor_s + config.safety_factor * tail


def _expected(stages: list[_Stage]) -> float:
    """Expected seconds of a chunk's background calls, one after the other."""
    return sum(estimator.expected(Lane.BACKGROUND, size) for estimator, size in stages)
