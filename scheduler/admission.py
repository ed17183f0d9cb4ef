"""LM admission: which waiting requests join the running batch before the next decode step.

The engine describes its state as plain data (`AdmissionState`) and gets back
the ids to prefill now, in order. Prefill stalls every running stream, so the
deadline-aware policy only admits while each playing stream has enough audio
buffered to ride out the stall.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Sequence

from .config import AdmissionPolicyName, SchedulerConfig


@dataclass(frozen=True)
class StreamStatus:
    """A running stream as the LM sees it: audio it has emitted and when its first chunk was emitted."""

    request_id: str
    emitted_audio_s: float
    t_first_emitted: float | None  # None: no chunk emitted yet, playback not started

    def buffered_s(self, now: float) -> float | None:
        """Audio emitted but not yet played at `now` (negative: the stream is stalling)."""
        if self.t_first_emitted is None:
            return None
        return self.emitted_audio_s - (now - self.t_first_emitted)


@dataclass(frozen=True)
class WaitingRequest:
    """A request waiting for a slot, with the engine's estimate of its prefill time."""

    request_id: str
    arrival_time: float
    expected_prefill_s: float

    def __post_init__(self) -> None:
        if not self.expected_prefill_s >= 0.0:
            raise ValueError(f"expected_prefill_s must be >= 0, got {self.expected_prefill_s}")


@dataclass(frozen=True)
class AdmissionState:
    """Everything a policy sees between two decode steps. `waiting` is in arrival order."""

    now: float
    num_free_slots: int
    step_time_s: float  # the engine's estimate of one decode step of the running batch
    running: Sequence[StreamStatus]
    waiting: Sequence[WaitingRequest]

    def __post_init__(self) -> None:
        if self.num_free_slots < 0:
            raise ValueError(f"num_free_slots must be >= 0, got {self.num_free_slots}")
        if not self.step_time_s >= 0.0:
            raise ValueError(f"step_time_s must be >= 0, got {self.step_time_s}")

    def min_buffered_s(self) -> float | None:
        """Least buffered audio over playing streams; None when no stream is playing."""
        buffered = [b for b in (s.buffered_s(self.now) for s in self.running) if b is not None]
        return min(buffered, default=None)


class AdmissionPolicy(ABC):
    """Chooses the waiting requests to prefill before the next decode step."""

    @abstractmethod
    def admit(self, state: AdmissionState) -> list[str]:
        """Request ids to admit now, in prefill order (at most `num_free_slots`)."""


class PrefillFirstPolicy(AdmissionPolicy):
    """Admit every waiting request up to the free slots, in arrival order."""

    def admit(self, state: AdmissionState) -> list[str]:
        return [w.request_id for w in state.waiting[: state.num_free_slots]]


class DeadlineAwarePolicy(AdmissionPolicy):
    """Admit only while every playing stream keeps enough buffered audio.

    A request fits when min buffered >= (prefill of everything admitted this
    round, itself included) + one step + margin. Admission is FIFO and stops at
    the first request that does not fit, so a long prompt is not overtaken
    forever. With no playing stream there is nothing to protect: admit up to the
    free slots. Starvation guard: a request that has waited >= `max_wait_s` is
    admitted regardless (its prefill still spends the budget of later ones).
    """

    def __init__(self, margin_s: float, max_wait_s: float) -> None:
        if not margin_s >= 0.0 or not max_wait_s >= 0.0:
            raise ValueError(f"margin_s and max_wait_s must be >= 0, got {margin_s}, {max_wait_s}")
        self._margin_s = margin_s
        self._max_wait_s = max_wait_s

    def admit(self, state: AdmissionState) -> list[str]:
        candidates = list(state.waiting[: state.num_free_slots])
        overdue = [w for w in candidates if self._is_overdue(w, state.now)]
        budget = self._budget(state) - sum(w.expected_prefill_s for w in overdue)
        admitted = list(overdue)
        for request in candidates:
            if request in overdue:
                continue
            if request.expected_prefill_s > budget:
                break
            budget -= request.expected_prefill_s
            admitted.append(request)
        return [w.request_id for w in admitted]

    def _is_overdue(self, request: WaitingRequest, now: float) -> bool:
        return now - request.arrival_time >= self._max_wait_s

    def _budget(self, state: AdmissionState) -> float:
        """Prefill seconds the playing streams can absorb this round."""
        min_buffered = state.min_buffered_s()
        if min_buffered is None:
            return math.inf
        return min_buffered - state.step_time_s - self._margin_s


def make_admission_policy(config: SchedulerConfig) -> AdmissionPolicy:
    """The policy named by `config.admission_policy`."""
    if config.admission_policy is AdmissionPolicyName.PREFILL_FIRST:
        return PrefillFirstPolicy()
    return DeadlineAwarePolicy(margin_s=config.admission_margin_s, max_wait_s=config.max_wait_s)
