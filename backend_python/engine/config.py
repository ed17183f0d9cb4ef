"""The LM engine's settings: rendered into, and parsed from, the LM lane's config.pbtxt parameters.

Torch-free, so `voxlane serve` can build and render it without loading the model stack.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from scheduler import SchedulerConfig

_RENDERED = ("max_slots", "max_seq_len", "max_queued")  # codec_left_context_frames comes from the model family


@dataclass(frozen=True)
class EngineConfig:
    """Slots, sequence length and queue limit of the LM lane, plus its scheduler settings."""

    max_slots: int = 32
    max_seq_len: int = 2048
    max_queued: int = 128  # requests waiting for a slot; beyond it new ones are refused at once
    codec_left_context_frames: int = 25
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)  # chunking and admission
    overlap_steps: bool | None = None  # launch step t+1 before reading step t's codes; None: on CUDA only

    def __post_init__(self) -> None:
        if self.max_slots < 1:
            raise ValueError(f"max_slots must be >= 1, got {self.max_slots}")
        if self.max_queued < 1:
            raise ValueError(f"max_queued must be >= 1, got {self.max_queued}")
        if self.max_seq_len < 16:
            raise ValueError(f"max_seq_len must be >= 16, got {self.max_seq_len}")
        if self.codec_left_context_frames < 0:
            raise ValueError("codec_left_context_frames must be >= 0")

    @classmethod
    def from_parameters(cls, params: Mapping[str, str], codec_left_context_frames: int) -> "EngineConfig":
        """From the LM model's config.pbtxt parameters (strings); absent keys keep the defaults."""
        try:
            sizes = {key: int(params[key]) for key in _RENDERED if key in params}
        except ValueError as error:
            raise ValueError(f"bad engine parameter: {error}") from error
        return cls(**sizes, codec_left_context_frames=codec_left_context_frames,
                   scheduler=SchedulerConfig.from_dict(params, ignore_unknown=True))

    def to_parameters(self) -> dict[str, str]:
        """The parameters `from_parameters` reads: the sizes and every scheduler field."""
        return {**{key: str(getattr(self, key)) for key in _RENDERED}, **self.scheduler.to_parameters()}
