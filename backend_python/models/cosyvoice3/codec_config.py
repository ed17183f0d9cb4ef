"""The CosyVoice 3 codec's config: the flow's and HiFT's sizes, the flow solver's settings and the serving windows."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from protocol.settings import read_settings

from ..base import CodecWindowing
from ..layers.dit import DiTConfig
from .flow import FlowConfig
from .hift import HiFTConfig


@dataclass(frozen=True)
class CosyVoice3CodecConfig:
    """The flow's and HiFT's sizes, the solver's settings, and the serving windows (in 25 Hz token frames)."""

    flow: FlowConfig = field(default_factory=FlowConfig)
    hift: HiFTConfig = field(default_factory=HiFTConfig)
    n_timesteps: int = 10  # Euler steps of the flow (the reference's flow.inference uses 10)
    cfg_rate: float = 0.7  # classifier-free guidance (the reference's inference_cfg_rate)
    left_context_frames: int = 32  # how these three were chosen: codec.py
    lookahead_frames: int = 4
    overlap_frames: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.flow, dict):
            object.__setattr__(self, "flow", FlowConfig(**self.flow))
        if isinstance(self.hift, dict):
            object.__setattr__(self, "hift", HiFTConfig(**self.hift))
        if self.n_timesteps < 1 or self.cfg_rate < 0:
            raise ValueError(f"need n_timesteps >= 1 and cfg_rate >= 0, got {self.n_timesteps}, {self.cfg_rate}")
        if self.flow.output_size != self.hift.in_channels:
            raise ValueError(f"the flow's {self.flow.output_size} mel bins must be HiFT's in_channels")
        self.windowing  # validates the three frame counts

    @property
    def windowing(self) -> CodecWindowing:
        return CodecWindowing(self.left_context_frames, self.lookahead_frames, self.overlap_frames)

    @property
    def samples_per_frame(self) -> int:
        return self.flow.token_mel_ratio * self.hift.samples_per_mel_frame

    @classmethod
    def tiny(cls, **overrides) -> "CosyVoice3CodecConfig":
        """The reference topology at CPU-test size: a 2-layer DiT of width 64, HiFT with 32 base channels."""
        flow = FlowConfig(pre_lookahead_channels=64,
                          estimator=DiTConfig(dim=64, depth=2, heads=4, dim_head=16, ff_mult=2))
        return cls(flow=flow, hift=HiFTConfig(base_channels=32, f0_cond_channels=32), **overrides)

    @classmethod
    def full(cls, **overrides) -> "CosyVoice3CodecConfig":
        """The sizes of the reference's cosyvoice3.yaml (Fun-CosyVoice3-0.5B)."""
        return cls(**overrides)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "CosyVoice3CodecConfig":
        return read_settings(cls, d)
