"""The one settings object of the scheduler layer: rendered into, and parsed from, Triton parameters.

`voxlane serve` builds a `SchedulerConfig` and writes `to_parameters()` into the
config.pbtxt of both models that schedule (the router and the LM lane); each
parses them back with `from_dict`, so both see the same values.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Mapping

from protocol.settings import read_settings

from .chunking import ChunkingConfig
from .lanes import ServingMode


class AdmissionPolicyName(str, Enum):
    """How the LM engine lets waiting requests join the running batch."""

    PREFILL_FIRST = "prefill-first"  # admit up to free slots, prefill before decoding
    DEADLINE_AWARE = "deadline-aware"  # admit only while running streams keep enough audio


@dataclass(frozen=True)
class SchedulerConfig:
    """Routing, admission and chunking settings (seconds unless named otherwise).

    A chunk is urgent when its slack < margin, where
    margin = margin_floor_s + safety_factor * expected background latency, or, with
    `margin_quantile` q set, margin_floor_s + safety_factor * (q-quantile - expected): the
    latency tail beyond the mean that the slack already counts.
    A cascade's chunk that needs a refinement call counts the background refinement lane's
    expected latency (and its tail) with the background codec's.
    With `urgent_budget` N > 0, a low-slack chunk that finds N calls in flight on the urgent
    lane (the urgent codec's and a cascade's urgent refiner's) goes to the background lane
    instead (first chunks stay urgent).
    """

    mode: ServingMode = ServingMode.VOXLANE
    margin_floor_s: float = 0.05  # covers the BLS/gRPC hops and send jitter
    safety_factor: float = 1.0  # in units of expected background decode latency
    admission_policy: AdmissionPolicyName = AdmissionPolicyName.DEADLINE_AWARE
    admission_margin_s: float = 0.1  # buffered audio kept on top of prefill + one step
    max_wait_s: float = 2.0  # a request waiting this long is admitted regardless
    latency_prior_s: float = 0.05  # expected decode latency before any observation
    latency_alpha: float = 0.2  # EWMA weight of a new latency observation
    margin_quantile: float | None = None  # None: the margin scales the mean; q in (0, 1): that quantile's tail
    latency_window: int = 64  # latest observations per (lane, batch size) the quantile is taken over
    urgent_budget: int = 0  # urgent-lane calls in flight beyond which low-slack chunks go background; 0: none
    chunking: ChunkingConfig = field(default_factory=ChunkingConfig)

    def __post_init__(self) -> None:
        _check_type("mode", self.mode, ServingMode)
        _check_type("admission_policy", self.admission_policy, AdmissionPolicyName)
        _check_type("chunking", self.chunking, ChunkingConfig)
        for name in ("margin_floor_s", "safety_factor", "admission_margin_s", "latency_prior_s"):
            _check_finite_non_negative(name, getattr(self, name))
        if not (isinstance(self.max_wait_s, (int, float)) and self.max_wait_s >= 0.0):
            raise ValueError(f"max_wait_s must be >= 0 (inf disables it), got {self.max_wait_s!r}")
        if not (isinstance(self.latency_alpha, (int, float)) and 0.0 < self.latency_alpha <= 1.0):
            raise ValueError(f"latency_alpha must be in (0, 1], got {self.latency_alpha!r}")
        if self.margin_quantile is not None and not (isinstance(self.margin_quantile, (int, float))
                                                     and 0.0 < self.margin_quantile < 1.0):
            raise ValueError(f"margin_quantile must be in (0, 1) or None, got {self.margin_quantile!r}")
        for name in ("latency_window", "urgent_budget"):
            value = getattr(self, name)
            if not (isinstance(value, int) and not isinstance(value, bool) and value >= (name == "latency_window")):
                raise ValueError(f"{name} must be an int >= {int(name == 'latency_window')}, got {value!r}")

    @classmethod
    def from_dict(cls, params: Mapping[str, Any], *, ignore_unknown: bool = False) -> SchedulerConfig:
        """Build from Triton config parameters.

        Values may be strings or Triton's `{"string_value": "..."}` form (protocol.settings reads them). Keys
        are the field names, with the ChunkingConfig fields beside them for the chunking (`chunk_growth`
        "none": no ramp). Absent keys keep the dataclass defaults. Unknown keys raise unless `ignore_unknown`
        (pass the whole model parameter map with it set).
        """
        return read_settings(cls, params, flatten=("chunking",), ignore_unknown=ignore_unknown,
                             what="scheduler parameter")

    def to_parameters(self) -> dict[str, str]:
        """Every field as a Triton parameter string (the chunking flattened); `from_dict` reads it back."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "chunking"}
        values.update((key, getattr(self.chunking, key)) for key in _CHUNKING_KEYS)
        return {key: render_value(value) for key, value in values.items()}


def render_value(value: Any) -> str:
    """One parameter value as config.pbtxt carries it: enums by value, floats exactly, None as "none"."""
    if value is None:
        return "none"
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)  # round-trips, and inf is "inf"
    return str(value)


_CHUNKING_KEYS = tuple(f.name for f in dataclasses.fields(ChunkingConfig))
def _check_type(name: str, value: Any, expected: type) -> None:
    if not isinstance(value, expected):
        raise ValueError(f"{name} must be a {expected.__name__}, got {value!r}")


def _check_finite_non_negative(name: str, value: Any) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0.0):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
