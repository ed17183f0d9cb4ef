"""Routing and admission policy, playback clocks and latency estimates.

Pure Python (standard library only): no torch, numpy or Triton import, and no
clock of its own; every function that needs the time takes `now`.
"""
from .admission import (
    AdmissionPolicy,
    AdmissionState,
    DeadlineAwarePolicy,
    PrefillFirstPolicy,
    StreamStatus,
    WaitingRequest,
    make_admission_policy,
)
from .chunking import ChunkingConfig, ChunkPlan, ChunkSpan
from .config import AdmissionPolicyName, SchedulerConfig
from .first_audio import PHASES as FIRST_AUDIO_PHASES, LMStamps, first_audio_phases
from .flow import AckedFlow, FlowConfig, UnreadBound
from .kv_blocks import Extent, KVBlocks
from .lanes import Lane, ServingMode
from .pacing import PacedStream, pick_rows
from .latency import LatencyEstimator, LatencyStat
from .playback import PlaybackClock
from .routing import ROUTES, ChunkRouter, RouteDecision, RouteReason

__all__ = [
    "AckedFlow",
    "AdmissionPolicy",
    "AdmissionPolicyName",
    "AdmissionState",
    "ChunkPlan",
    "ChunkRouter",
    "ChunkSpan",
    "ChunkingConfig",
    "FIRST_AUDIO_PHASES",
    "FlowConfig",
    "DeadlineAwarePolicy",
    "Extent",
    "KVBlocks",
    "Lane",
    "LatencyEstimator",
    "LatencyStat",
    "LMStamps",
    "PacedStream",
    "PlaybackClock",
    "PrefillFirstPolicy",
    "RouteDecision",
    "RouteReason",
    "ROUTES",
    "SchedulerConfig",
    "ServingMode",
    "UnreadBound",
    "StreamStatus",
    "WaitingRequest",
    "first_audio_phases",
    "make_admission_policy",
    "pick_rows",
]
