"""What a reference (a voice to clone) may be: one table for the server (`vox_ensemble`, `voice_encoder`,
`voice_registry` check it; `voxlane serve` renders it into their parameters) and the gateway (which checks a file's
header against it before decoding a sample, and decodes no more than it allows). Torch- and numpy-free."""
from __future__ import annotations

import math
from dataclasses import dataclass, fields

from protocol.settings import read_settings
from protocol.tensors import REQUEST_INPUTS

_RATE = REQUEST_INPUTS["ref_sample_rate"]
MAX_CHANNELS = 64  # a reference file's channels, which the gateway averages (the server takes mono)


@dataclass(frozen=True)
class ReferenceLimits:
    """What a reference may be: parameters of `vox_ensemble` and `voice_encoder` (`voxlane serve` renders them)."""

    max_ref_audio_s: float = 60.0
    min_ref_audio_s: float = 0.5  # shorter carries too little of a voice
    max_ref_text_chars: int = 2000  # the transcript's length
    range_tolerance: float = 0.01  # how far past [-1, 1] a sample may go (resampled PCM overshoots a little)
    min_peak: float = 1e-3  # a reference whose loudest sample is below this (-60 dBFS) is silence

    def __post_init__(self) -> None:
        if not 0 < self.min_ref_audio_s <= self.max_ref_audio_s:
            raise ValueError(f"inconsistent reference limits: {self}")
        if self.max_ref_text_chars < 1 or self.range_tolerance < 0 or not 0 <= self.min_peak < 1:
            raise ValueError(f"inconsistent reference limits: {self}")

    @property
    def min_rate(self) -> int:
        """The lowest `ref_sample_rate` the server takes (its input's table)."""
        return int(_RATE.low)

    @property
    def max_rate(self) -> int:
        """The highest `ref_sample_rate` the server takes: a file at a higher rate is refused, never decoded."""
        return int(_RATE.high)

    def max_samples(self, rate: int) -> int:
        """The most samples of one channel at `rate` a reference may hold: `max_ref_audio_s` of them."""
        return math.floor(self.max_ref_audio_s * rate)

    @classmethod
    def from_parameters(cls, params: dict[str, str]) -> "ReferenceLimits":
        """From a model's config.pbtxt parameters; absent keys keep the defaults."""
        return read_settings(cls, params, ignore_unknown=True)

    def to_parameters(self) -> dict[str, str]:
        """Every field as the string `from_parameters` reads back."""
        return {f.name: f"{value:g}" if isinstance(value := getattr(self, f.name), float) else str(value)
                for f in fields(self)}
