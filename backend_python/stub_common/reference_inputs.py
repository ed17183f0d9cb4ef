"""A voice to clone (issue 17): the reference inputs of `vox_ensemble`, checked, and resampled for the encoder.

Torch-free (numpy and soxr) and fast, so the router refuses a bad reference at once, before any model work:
empty, too short or too long, NaN or inf, outside [-1, 1], silent (clipped to nothing), a missing or
unsupported `ref_sample_rate`, reference inputs without `ref_audio`, in-context cloning without `ref_text`.
Each refusal is a `RequestError` naming its input and a code. `voice_encoder` resamples with `resample`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from backend_python.stub_common.request_inputs import GetInput, RequestError, control_character
from protocol.reference import ReferenceLimits  # the one table of a reference's limits; re-exported here
from protocol.tensors import REFERENCE_INPUTS, REQUEST_INPUTS

__all__ = ["ReferenceAudio", "ReferenceLimits", "check_reference_audio", "parse_reference", "resample"]

RATE = REQUEST_INPUTS["ref_sample_rate"]


@dataclass(frozen=True)
class ReferenceAudio:
    """A checked reference: what the router sends to `voice_encoder` (and `text` on to the LM)."""

    audio: np.ndarray  # [n] float32 mono, at `sample_rate`
    sample_rate: int
    text: str | None  # the transcript; None for the speaker embedding alone (`x_vector_only`)
    x_vector_only: bool


def parse_reference(get: GetInput, limits: ReferenceLimits, needs_text: bool = True) -> ReferenceAudio | None:
    """The request's reference, or None without `ref_audio`; raises RequestError naming what is wrong.
    `needs_text`: refuse in-context cloning without `ref_text` (`voice_encoder`, which never gets it, does not)."""
    audio = get("ref_audio")
    if audio is None:
        _check_no_reference_inputs(get)
        return None
    rate = _sample_rate(get)
    x_vector_only = bool(_scalar(get, "x_vector_only") or REQUEST_INPUTS["x_vector_only"].default)
    text = _transcript(get, limits)
    if text is None and not x_vector_only and needs_text:
        raise RequestError("in-context cloning needs 'ref_text', the transcript of 'ref_audio'; send it, or set "
                           "'x_vector_only' to clone from the speaker embedding alone", param="ref_text",
                           code="missing_ref_text")
    audio = np.array(audio, dtype=np.float32).reshape(-1)  # a copy: the request's tensor is freed with it
    check_reference_audio(audio, rate, limits)
    return ReferenceAudio(audio, rate, None if x_vector_only else text, x_vector_only)


def check_reference_audio(audio: np.ndarray, rate: int, limits: ReferenceLimits) -> None:
    """Refuse reference audio ([n] float32 at `rate`) that is empty, too short or long, not finite, out of
    range or silent. The cheap checks first: a 60 s reference is scanned twice at most (~3 M samples)."""
    if audio.size == 0:
        raise _audio_error("input 'ref_audio' is empty", "empty_ref_audio")
    seconds = audio.size / rate
    if seconds < limits.min_ref_audio_s:
        raise _audio_error(f"input 'ref_audio' holds {seconds:.3g} s at {rate} Hz; a reference needs at least "
                           f"{limits.min_ref_audio_s:g} s", "ref_audio_too_short")
    if seconds > limits.max_ref_audio_s:
        raise _audio_error(f"input 'ref_audio' holds {seconds:.3g} s at {rate} Hz; the limit is "
                           f"{limits.max_ref_audio_s:g} s", "ref_audio_too_long")
    peak = float(np.max(np.abs(audio)))  # NaN when any sample is NaN
    if not math.isfinite(peak):
        index = int(np.flatnonzero(~np.isfinite(audio))[0])
        raise _audio_error(f"input 'ref_audio' is not finite: sample {index} is {float(audio[index])}",
                           "ref_audio_not_finite")
    if peak > 1.0 + limits.range_tolerance:
        index = int(np.argmax(np.abs(audio)))
        raise _audio_error(f"input 'ref_audio' must be PCM in [-1, 1]: sample {index} is {float(audio[index]):.4g}",
                           "ref_audio_out_of_range")
    if peak < limits.min_peak:
        raise _audio_error(f"input 'ref_audio' is silent: its peak {peak:.3g} is below {limits.min_peak:g}",
                           "ref_audio_silent")


def resample(audio: np.ndarray, rate: int, target_rate: int) -> np.ndarray:
    """[n] float32 at `rate` -> the same audio at `target_rate` (soxr, high quality; the same array when equal)."""
    if rate == target_rate:
        return audio
    import soxr
    return soxr.resample(np.ascontiguousarray(audio, dtype=np.float32), rate, target_rate, quality="HQ")


def _audio_error(message: str, code: str) -> RequestError:
    return RequestError(message, param="ref_audio", code=code)


def _check_no_reference_inputs(get: GetInput) -> None:
    """Without `ref_audio`, another reference input is a mistake: it would be ignored."""
    for name in REFERENCE_INPUTS:
        if get(name) is not None:
            raise RequestError(f"input '{name}' belongs to a reference: send 'ref_audio' with it", param=name,
                               code="missing_ref_audio")


def _sample_rate(get: GetInput) -> int:
    rate = _scalar(get, "ref_sample_rate")
    if rate is None:
        raise RequestError("input 'ref_audio' needs 'ref_sample_rate', its sample rate in Hz", param="ref_sample_rate",
                           code="missing_ref_sample_rate")
    if not RATE.low <= int(rate) <= RATE.high:
        raise RequestError(f"input 'ref_sample_rate' must be in [{RATE.low}, {RATE.high}] Hz, got {int(rate)}",
                           param="ref_sample_rate", code="unsupported_ref_sample_rate")
    return int(rate)


def _transcript(get: GetInput, limits: ReferenceLimits) -> str | None:
    """`ref_text`, trimmed; None when absent or blank."""
    value = _scalar(get, "ref_text")
    if value is None:
        return None
    try:
        text = bytes(value).decode("utf-8") if not isinstance(value, str) else value
    except UnicodeDecodeError as exc:
        raise RequestError(f"input 'ref_text' is not valid UTF-8 (byte {exc.start})", param="ref_text") from None
    if (bad := control_character(text)) is not None:
        raise RequestError(f"input 'ref_text' contains control character U+{ord(bad):04X}", param="ref_text")
    text = text.strip()
    if len(text) > limits.max_ref_text_chars:
        raise RequestError(f"input 'ref_text' has {len(text)} characters; the limit is {limits.max_ref_text_chars}",
                           param="ref_text")
    return text or None


def _scalar(get: GetInput, name: str) -> object | None:
    array = get(name)
    if array is None:
        return None
    if array.size != 1:
        raise RequestError(f"input '{name}' must hold exactly one value, got shape {list(array.shape)}", param=name)
    return array.reshape(-1)[0]
