"""The public request contract of `vox_ensemble`, parsed and validated.

Pure numpy so it is unit-testable without a server. The router parses here, once
(a bad request fails fast, before any model work), and passes the typed request on to
`speechlm_lm` as one `speech_request` input (`SpeechRequest.to_json`); the LM lane parses
the inputs themselves only for a caller that reaches it directly.
"""
from __future__ import annotations

import dataclasses
import json
import math
import unicodedata
from dataclasses import dataclass
from typing import Callable

import numpy as np

from protocol.formats import FORMATS, PCM_F32, SAMPLE_RATES, TRITON_FORMATS
from protocol.quoting import quoted
from protocol.settings import read_settings
from protocol.errors import RequestError  # noqa: F401 - this module's callers import it here too
from protocol.limits import RequestLimits  # noqa: F401 - and the limits it checks against
from protocol.tensors import INPUT_NAMES, REQUEST_INPUTS, SPEECH_REQUEST as SPEECH_REQUEST_NAME, TIMESTAMP_KINDS
from protocol.tensors import TIMESTAMPS_NONE, TIMESTAMPS_WORD


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
    client_acks: bool = False  # the client acks the chunks it takes (protocol.tensors: `client_acks`)
    is_text_open: bool = False  # a streaming-text session: `text` is its start (maybe empty), more follows
    is_audio_in: bool = False  # an audio-in session: no text; its input frames follow (INPUT_CODES)
    text_idle_timeout_s: float = 30.0  # such a session's longest wait for a piece
    language: str | None = None  # as the client spelled it, e.g. "English" or "auto"; None: the model's
    instructions: str = ""  # a style or emotion text; "": none
    non_streaming_mode: bool = False  # the whole text in the prefill (the reference's non-streaming prompt)
    word_timestamps: bool = False  # `timestamps` "word": each chunk carries the words it speaks

    def to_json(self) -> str:
        """The typed request as the router passes it on (protocol.tensors SPEECH_REQUEST)."""
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "SpeechRequest":
        """A request the router parsed (`to_json`). Not a client's input: a form that does not fit raises
        ValueError, the server's own fault."""
        try:
            fields = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"{SPEECH_REQUEST_NAME} is not JSON: {exc}") from None
        if not isinstance(fields, dict):
            raise ValueError(f"{SPEECH_REQUEST_NAME} must be a JSON object, got {text[:200]!r}")
        return read_settings(cls, fields, what=SPEECH_REQUEST_NAME)


@dataclass(frozen=True)
class AudioOptions:
    """How a stream's audio goes back to its client (the router applies it; the LM never sees it)."""

    audio_format: str = PCM_F32
    sample_rate: int | None = None  # None: the model's own rate
    speed: float = 1.0  # the tempo (pitch kept)

    @property
    def is_encoded(self) -> bool:
        return self.audio_format != PCM_F32


GetInput = Callable[[str], "np.ndarray | None"]


def parse_speech_request(get: GetInput, limits: RequestLimits, is_text_open: bool = False) -> SpeechRequest:
    """Build a SpeechRequest from named input arrays; raises RequestError naming the problem.

    `is_text_open`: the first request of a streaming-text session, whose `text` may be empty (its pieces
    are checked as they come, by the router)."""
    text = _open_text(get("text")) if is_text_open else _parse_text(get("text"), limits)
    voice = _scalar(get, "voice")
    return SpeechRequest(
        text=text,
        voice=_decode_utf8(voice, "voice").strip() or None if voice is not None else None,
        temperature=_ranged(get, "temperature"),
        top_p=_ranged(get, "top_p"),
        top_k=int(_ranged(get, "top_k")),
        repetition_penalty=_ranged(get, "repetition_penalty"),
        seed=_optional_int(get, "seed"),
        max_audio_seconds=_ranged(get, "max_audio_seconds", limits.default_audio_seconds_for(text),
                                  limits.max_audio_seconds),
        ignore_eos=bool(_scalar(get, "ignore_eos") or REQUEST_INPUTS["ignore_eos"].default),
        client_acks=bool(_scalar(get, "client_acks") or REQUEST_INPUTS["client_acks"].default),
        is_text_open=is_text_open,
        text_idle_timeout_s=_ranged(get, "text_idle_timeout_s", limits.text_idle_timeout_s, limits.text_idle_timeout_s),
        language=_language(get),
        instructions=_instructions(get, limits),
        non_streaming_mode=bool(_scalar(get, "non_streaming_mode") or REQUEST_INPUTS["non_streaming_mode"].default),
        word_timestamps=_timestamps(get),
    )


def with_start_text(req: SpeechRequest, text: str, limits: RequestLimits, is_cap_given: bool) -> SpeechRequest:
    """A streaming-text request once its first piece is decoded (the router checks pieces as they come): the
    audio cap a client left out is the one that start earns, as for a whole text."""
    cap = req.max_audio_seconds if is_cap_given else limits.default_audio_seconds_for(text)
    return dataclasses.replace(req, text=text, max_audio_seconds=cap)


def _timestamps(get: GetInput) -> bool:
    """`timestamps`: "word" (True) or "none" (False, the default), any case."""
    value = _scalar(get, "timestamps")
    text = TIMESTAMPS_NONE if value is None else _decode_utf8(value, "timestamps").strip().lower()
    if text not in TIMESTAMP_KINDS:
        raise RequestError(f"input 'timestamps' must be '{TIMESTAMPS_WORD}' or '{TIMESTAMPS_NONE}', got {quoted(text)}",
                           param="timestamps")
    return text == TIMESTAMPS_WORD


def _language(get: GetInput) -> str | None:
    """`language` stripped, in the client's own spelling: a refusal echoes it, and the LM lane lowercases it
    where it compares it with the family's names (speechlm_lm/prompt_options.py)."""
    value = _scalar(get, "language")
    return None if value is None else _decode_utf8(value, "language").strip() or None


def _instructions(get: GetInput, limits: RequestLimits) -> str:
    value = _scalar(get, "instructions")
    text = "" if value is None else _decode_utf8(value, "instructions").strip()
    if (bad := control_character(text)) is not None:
        raise RequestError(f"input 'instructions' contains control character U+{ord(bad):04X}", param="instructions")
    if len(text) > limits.max_text_chars:
        raise RequestError(f"input 'instructions' has {len(text)} characters; the limit is {limits.max_text_chars}",
                           param="instructions")
    return text


def _open_text(array: np.ndarray | None) -> str:
    """A streaming-text session's first text, as the router passed it on (whole characters); may be empty."""
    if array is None:
        return ""
    if array.size != 1:
        raise RequestError(f"input 'text' must hold exactly one string, got shape {list(array.shape)}",
                           param="text")
    return _decode_utf8(array.reshape(-1)[0], "text")


def control_character(text: str) -> str | None:
    """The first control character `text` may not hold (tab, CR and LF are fine), or None."""
    return next((c for c in text if unicodedata.category(c) in ("Cc", "Cs") and c not in "\n\t\r"), None)


def parse_audio_options(get: GetInput) -> AudioOptions:
    """The output options `audio_format` and `sample_rate`; raises RequestError naming the bad one."""
    fmt = _scalar(get, "audio_format")
    fmt = REQUEST_INPUTS["audio_format"].default if fmt is None else _decode_utf8(fmt, "audio_format").strip()
    if fmt not in TRITON_FORMATS:
        raise RequestError(f"input 'audio_format' must be one of {', '.join(TRITON_FORMATS)}, got {fmt!r}",
                           param="audio_format")
    rate = _scalar(get, "sample_rate")
    if rate is not None and int(rate) not in SAMPLE_RATES:
        raise RequestError(f"input 'sample_rate' must be one of {', '.join(map(str, SAMPLE_RATES))}, got {rate!r}",
                           param="sample_rate")
    rate = None if rate is None else int(rate)
    allowed = FORMATS[fmt].sample_rates if fmt in FORMATS else SAMPLE_RATES
    if rate is not None and rate not in allowed:
        raise RequestError(f"audio_format '{fmt}' carries sample_rate {', '.join(map(str, allowed))} only, got {rate}",
                           param="sample_rate", code="unsupported_value")
    return AudioOptions(fmt, rate, _ranged(get, "speed"))


def check_request_parameters(parameters_json: str) -> None:
    """Refuse request parameters: every setting is an input, so a parameter (say a misspelt
    field of an HTTP `generate` body, which Triton passes on as one) would be silently ignored."""
    names = sorted(json.loads(parameters_json or "{}"))
    if names:
        raise RequestError(f"unknown request parameter {quoted(names[0])}; the settings of this model are its "
                           f"inputs: {', '.join(INPUT_NAMES)}")


def _parse_text(array: np.ndarray | None, limits: RequestLimits) -> str:
    if array is None:
        raise RequestError("missing required input 'text'", param="text")
    if array.size != 1:
        raise RequestError(f"input 'text' must hold exactly one string, got shape {list(array.shape)}",
                           param="text")
    text = _decode_utf8(array.reshape(-1)[0], "text")
    if (bad := control_character(text)) is not None:
        raise RequestError(f"input 'text' contains control character U+{ord(bad):04X}", param="text")
    text = text.strip()
    if not any(is_speakable(c) for c in text):  # only spaces and invisible format characters
        raise RequestError("input 'text' is empty or whitespace only", param="text")
    if len(text) > limits.max_text_chars:
        raise RequestError(f"input 'text' has {len(text)} characters; the limit is {limits.max_text_chars}",
                           param="text")
    return text


def is_speakable(char: str) -> bool:
    """Not a space, a separator or a format character (U+200B, U+FEFF, ...), which carry no sound."""
    return not char.isspace() and unicodedata.category(char) not in _SILENT_CATEGORIES


_SILENT_CATEGORIES = ("Cc", "Cf", "Zs", "Zl", "Zp")


def _decode_utf8(value: object, name: str) -> str:
    if isinstance(value, str):
        return value
    if not isinstance(value, (bytes, np.bytes_)):
        raise RequestError(f"input '{name}' must be BYTES (UTF-8 text)", param=name)
    try:
        return bytes(value).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RequestError(f"input '{name}' is not valid UTF-8 (byte {exc.start})", param=name) from None


def _scalar(get: GetInput, name: str) -> object | None:
    array = get(name)
    if array is None:
        return None
    if array.size != 1:
        raise RequestError(f"input '{name}' must hold exactly one value, got shape {list(array.shape)}",
                           param=name)
    return array.reshape(-1)[0]


def _ranged(get: GetInput, name: str, default: float | None = None, high: float | None = None) -> float:
    """A numeric input within its table limits (`default`, `high`: where the table leaves them to the model)."""
    spec = REQUEST_INPUTS[name]
    low, high = spec.low, spec.high if high is None else high
    value = _scalar(get, name)
    if value is None:
        return spec.default if default is None else default
    value = float(value)
    if not math.isfinite(value) or not spec.bound_at_dtype(low) <= value <= spec.bound_at_dtype(high):
        raise RequestError(f"input '{name}' must be in [{low:g}, {high:g}], got {value!r}", param=name)
    return value


def _optional_int(get: GetInput, name: str) -> int | None:
    value = _scalar(get, name)
    return None if value is None else int(value)
