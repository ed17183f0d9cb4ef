"""The public request contract of `vox_ensemble`, parsed and validated.

Pure numpy so it is unit-testable without a server. The router validates here
first (a bad request fails fast, before any model work), then forwards the same
tensors to `speechlm_lm`, which parses them again with this code.
"""
from __future__ import annotations

import json
import math
import unicodedata
from dataclasses import dataclass
from typing import Callable

import numpy as np

# name -> numpy dtype of each optional scalar input, shape [1]
OPTIONAL_INPUTS: dict[str, type] = {
    "voice": np.object_,
    "temperature": np.float32,
    "top_p": np.float32,
    "top_k": np.int32,
    "repetition_penalty": np.float32,
    "seed": np.int64,
    "max_audio_seconds": np.float32,
    "ignore_eos": np.bool_,
}
INPUT_NAMES = ("text",) + tuple(OPTIONAL_INPUTS)


class RequestError(ValueError):
    """A client error; the message is sent back verbatim."""


@dataclass(frozen=True)
class RequestLimits:
    max_text_chars: int = 2000
    max_audio_seconds: float = 120.0
    default_audio_seconds: float = 60.0

    def __post_init__(self) -> None:
        if self.max_text_chars < 1 or not 0 < self.default_audio_seconds <= self.max_audio_seconds:
            raise ValueError(f"inconsistent request limits: {self}")

    @classmethod
    def from_parameters(cls, params: dict[str, str]) -> "RequestLimits":
        """From a model's config.pbtxt parameters; the router and the LM read the same keys."""
        defaults = cls()
        return cls(max_text_chars=int(params.get("max_text_chars", defaults.max_text_chars)),
                   max_audio_seconds=float(params.get("max_audio_seconds", defaults.max_audio_seconds)))


@dataclass(frozen=True)
class SpeechRequest:
    text: str
    voice: str | None
    temperature: float
    top_p: float
    top_k: int
    repetition_penalty: float
    seed: int | None
    max_audio_seconds: float
    ignore_eos: bool


GetInput = Callable[[str], "np.ndarray | None"]


def parse_speech_request(get: GetInput, limits: RequestLimits) -> SpeechRequest:
    """Build a SpeechRequest from named input arrays; raises RequestError naming the problem."""
    text = _parse_text(get("text"), limits)
    voice = _scalar(get, "voice")
    return SpeechRequest(
        text=text,
        voice=_decode_utf8(voice, "voice").strip() or None if voice is not None else None,
        temperature=_ranged(get, "temperature", 0.9, 0.0, 10.0),
        top_p=_ranged(get, "top_p", 1.0, 1e-6, 1.0),
        top_k=int(_ranged(get, "top_k", 50, 0, 100_000)),
        repetition_penalty=_ranged(get, "repetition_penalty", 1.05, 1e-3, 10.0),
        seed=_optional_int(get, "seed"),
        max_audio_seconds=_ranged(get, "max_audio_seconds", limits.default_audio_seconds, 1e-3,
                                  limits.max_audio_seconds),
        ignore_eos=bool(_scalar(get, "ignore_eos") or False),
    )


def check_request_parameters(parameters_json: str) -> None:
    """Refuse request parameters: every setting is an input, so a parameter (say a misspelt
    field of an HTTP `generate` body, which Triton passes on as one) would be silently ignored."""
    names = sorted(json.loads(parameters_json or "{}"))
    if names:
        raise RequestError(f"unknown request parameter '{names[0]}'; the settings of this model are its "
                           f"inputs: {', '.join(INPUT_NAMES)}")


def _parse_text(array: np.ndarray | None, limits: RequestLimits) -> str:
    if array is None:
        raise RequestError("missing required input 'text'")
    if array.size != 1:
        raise RequestError(f"input 'text' must hold exactly one string, got shape {list(array.shape)}")
    text = _decode_utf8(array.reshape(-1)[0], "text")
    bad = [c for c in text if unicodedata.category(c) in ("Cc", "Cs") and c not in "\n\t\r"]
    if bad:
        raise RequestError(f"input 'text' contains control character U+{ord(bad[0]):04X}")
    text = text.strip()
    if not text:
        raise RequestError("input 'text' is empty or whitespace only")
    if len(text) > limits.max_text_chars:
        raise RequestError(f"input 'text' has {len(text)} characters; the limit is {limits.max_text_chars}")
    return text


def _decode_utf8(value: object, name: str) -> str:
    if isinstance(value, str):
        return value
    if not isinstance(value, (bytes, np.bytes_)):
        raise RequestError(f"input '{name}' must be BYTES (UTF-8 text)")
    try:
        return bytes(value).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RequestError(f"input '{name}' is not valid UTF-8 (byte {exc.start})") from None


def _scalar(get: GetInput, name: str) -> object | None:
    array = get(name)
    if array is None:
        return None
    if array.size != 1:
        raise RequestError(f"input '{name}' must hold exactly one value, got shape {list(array.shape)}")
    return array.reshape(-1)[0]


def _ranged(get: GetInput, name: str, default: float, low: float, high: float) -> float:
    value = _scalar(get, name)
    if value is None:
        return default
    value = float(value)
    if not math.isfinite(value) or not low <= value <= high:
        raise RequestError(f"input '{name}' must be in [{low:g}, {high:g}], got {value!r}")
    return value


def _optional_int(get: GetInput, name: str) -> int | None:
    value = _scalar(get, name)
    return None if value is None else int(value)
