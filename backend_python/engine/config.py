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
    codec_lookahead_frames: int = 0  # a chunk waits for this many frames after it (models/base.py CodecWindowing)
    codec_overlap_frames: int = 0  # of those, frames of audio cross-faded into the next chunk
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)  # chunking and admission
    overlap_steps: bool | None = None  # launch step t+1 before reading step t's codes; None: on CUDA only

    def __post_init__(self) -> None:
        if self.max_slots < 1:
            raise ValueError(f"max_slots must be >= 1, got {self.max_slots}")
        if self.max_queued < 1:
            raise ValueError(f"max_queued must be >= 1, got {self.max_queued}")
        if self.max_seq_len < 16:
            raise ValueError(f"max_seq_len must be >= 16, got {self.max_seq_len}")
        if min(self.codec_left_context_frames, self.codec_lookahead_frames, self.codec_overlap_frames) < 0:
            raise ValueError("codec context, lookahead and overlap frames must be >= 0")
        if self.codec_overlap_frames > self.codec_lookahead_frames:
            raise ValueError("codec_overlap_frames must not exceed codec_lookahead_frames")

    @classmethod
    def from_parameters(cls, params: Mapping[str, str], codec_windowing) -> "EngineConfig":
        """From the LM model's config.pbtxt parameters (strings); absent keys keep the defaults.
        `codec_windowing`: the model family's (registry.codec_windowing), or its left context frames alone."""
        try:
            sizes = {key: int(params[key]) for key in _RENDERED if key in params}
        except ValueError as error:
            raise ValueError(f"bad engine parameter: {error}") from error
        if isinstance(codec_windowing, int):
            window = {"codec_left_context_frames": codec_windowing}
        else:
            window = {"codec_left_context_frames": codec_windowing.left_context_frames,
                      "codec_lookahead_frames": codec_windowing.lookahead_frames,
                      "codec_overlap_frames": codec_windowing.overlap_frames}
        return cls(**sizes, **window, scheduler=SchedulerConfig.from_dict(params, ignore_unknown=True))

    def to_parameters(self) -> dict[str, str]:
        """The parameters `from_parameters` reads: the sizes and every scheduler field."""
        return {**{key: str(getattr(self, key)) for key in _RENDERED}, **self.scheduler.to_parameters()}
