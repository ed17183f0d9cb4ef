"""What a speech request may ask for beyond its tensors' own ranges (protocol.tensors): the length of its text and
the audio it may make. One table for the server (the router and the LM lane read it from their config.pbtxt
parameters, which `voxlane serve` renders from it) and the clients (the gateway, the benchmark). Torch- and
numpy-free."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from protocol.settings import convert, read_settings

SLOW_CHARS_PER_S = 7.0  # half the usual speaking rate (~14 characters per second): a text's default audio cap
# the fields that are model parameters (`default_audio_seconds` is not: it is this table's alone)
PARAMETERS = ("max_text_chars", "max_audio_seconds", "text_idle_timeout_s")


@dataclass(frozen=True)
class RequestLimits:
    max_text_chars: int = 20_000  # a whole text's (a chapter: ~25 min of speech), or a streaming-text session's pieces
    max_audio_seconds: float = 1800.0  # the ceiling of the `max_audio_seconds` input
    # a request that gives no max_audio_seconds: this, or for a longer text its length at SLOW_CHARS_PER_S
    default_audio_seconds: float = 60.0
    # a streaming-text session whose text gets no piece this long ends (its slot is freed): the default and
    # ceiling of the `text_idle_timeout_s` input (`voxlane serve --text-idle-timeout`)
    text_idle_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if self.max_text_chars < 1 or not 0 < self.default_audio_seconds <= self.max_audio_seconds:
            raise ValueError(f"inconsistent request limits: {self}")
        if not self.text_idle_timeout_s > 0:
            raise ValueError(f"text_idle_timeout_s must be > 0, got {self.text_idle_timeout_s}")

    def default_audio_seconds_for(self, text: str) -> float:
        """The audio cap of a whole text whose request gives none: room for it read slowly, within the ceiling."""
        return min(self.max_audio_seconds, max(self.default_audio_seconds, len(text) / SLOW_CHARS_PER_S))

    @classmethod
    def from_parameters(cls, params: Mapping[str, str]) -> "RequestLimits":
        """From a model's config.pbtxt parameters; the router and the LM read the same keys. A ceiling under the
        default audio cap (`voxlane serve --max-audio-seconds`) lowers that cap to it."""
        ceiling = convert(float, params.get("max_audio_seconds", cls.max_audio_seconds), "max_audio_seconds")
        return read_settings(cls, params, keys={key: key for key in PARAMETERS}, ignore_unknown=True,
                             given={"default_audio_seconds": min(cls.default_audio_seconds, ceiling)})

    def to_parameters(self) -> dict[str, str]:
        """The parameters `from_parameters` reads, as `voxlane serve` renders them."""
        return {key: f"{getattr(self, key):g}" for key in PARAMETERS}
