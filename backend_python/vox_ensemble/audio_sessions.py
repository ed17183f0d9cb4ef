"""Audio-in sessions: which live stream a piece of input audio reaches, each piece checked as it comes, and the
input cut into the encoder's fixed chunks (an interleaved model's input: it listens while it speaks).

A session is a Triton sequence on `vox_ensemble` whose first request carries `input_sample_rate` (the rate of
all its pieces): that request opens it and starts the stream, every request of it may carry a piece of
`input_audio`, and the one with the sequence-end flag closes the input. A bad piece (not mono float32, a NaN or
infinity, a sample past full scale, larger than `max_piece_s`, the input past `max_input_s`, a rate other than
the session's, a piece after the close) is refused with a code of PIECE_ERROR_CODES and changes nothing; the
session goes on.

`InputChunker` cuts the checked input on a fixed grid of `chunk_frames` codec frames from the stream's start,
each chunk sent to the voice encoder with up to `context_frames` of the audio before it (the encoder's left
context): what the encoder codes, and so what the model hears, depends on the audio alone, never on how the
client cut it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from backend_python.stub_common.request_inputs import RequestError
from backend_python.vox_ensemble.text_sessions import Sessions
from protocol.quoting import quoted
from protocol.settings import read_settings
from protocol.tensors import REQUEST_INPUTS

RATE = REQUEST_INPUTS["input_sample_rate"]
FRAME_RATE_GRID = 25  # rates must be multiples of this, so that a 12.5-Hz frame is a whole number of samples


@dataclass(frozen=True)
class AudioInLimits:
    """What a session's input may be: `vox_ensemble` parameters (`voxlane serve` renders them)."""

    max_piece_s: float = 10.0
    max_input_s: float = 600.0
    chunk_frames: int = 4  # the encoder's chunk, in codec frames (12.5 Hz)
    context_frames: int = 12  # left context given with each chunk
    frame_rate: float = 12.5

    @classmethod
    def from_parameters(cls, params: dict) -> "AudioInLimits":
        return read_settings(cls, params, keys=_PARAMETER_KEYS, ignore_unknown=True)


# the fields read from parameters, and their keys there (`frame_rate` is the encoder's own)
_PARAMETER_KEYS = {"max_piece_s": "max_input_piece_s", "max_input_s": "max_input_audio_s",
                   "chunk_frames": "input_chunk_frames", "context_frames": "input_context_frames"}


def check_rate(rate: int | None) -> int:
    if rate is None or not RATE.low <= int(rate) <= RATE.high or int(rate) % FRAME_RATE_GRID:
        raise RequestError(f"input 'input_sample_rate' must be a multiple of {FRAME_RATE_GRID} Hz in "
                           f"[{RATE.low}, {RATE.high}], got {rate}", param="input_sample_rate",
                           code="unsupported_input_sample_rate")
    return int(rate)


@dataclass
class AudioSession:
    session_id: object
    stream_id: str
    sample_rate: int
    limits: AudioInLimits
    num_samples: int = 0
    num_pieces: int = 0
    is_closed: bool = False

    def check(self, audio: np.ndarray | None, rate: int | None) -> np.ndarray:
        """The piece as [n] float32 (absent: empty); raises RequestError naming what is wrong."""
        where = f"piece {self.num_pieces} of audio-in session {quoted(self.session_id)}"
        if rate is not None and int(rate) != self.sample_rate:
            raise self._refused(f"{where} says {int(rate)} Hz; the session's rate is {self.sample_rate} Hz")
        if audio is None:
            return np.zeros(0, np.float32)
        if audio.dtype != np.float32:
            raise self._refused(f"{where} must be FP32 samples, got {audio.dtype}")
        samples = audio.reshape(-1)
        if samples.size > self.limits.max_piece_s * self.sample_rate:
            raise self._refused(f"{where} holds {samples.size / self.sample_rate:.1f} s; a piece may hold "
                                f"{self.limits.max_piece_s:g} s")
        if not np.isfinite(samples).all():
            raise self._refused(f"{where} holds a NaN or an infinity")
        if samples.size and float(np.abs(samples).max()) > 1.0:
            raise self._refused(f"{where} goes past full scale ({float(np.abs(samples).max()):.3g}); samples "
                                f"must be in [-1, 1]")
        if self.num_samples + samples.size > self.limits.max_input_s * self.sample_rate:
            raise self._refused(f"{where} would make the input longer than {self.limits.max_input_s:g} s")
        return samples

    def take(self, samples: np.ndarray, is_final: bool) -> None:
        self.num_samples += samples.size
        self.num_pieces += 1
        self.is_closed = is_final

    @staticmethod
    def _refused(detail: str) -> RequestError:
        return RequestError(f"{detail}; the piece is refused, the session goes on", param="input_audio",
                            code="bad_piece")


class AudioSessions(Sessions):
    """Live audio-in sessions."""

    param = "input_audio"

    def __init__(self, limits: AudioInLimits) -> None:
        super().__init__()
        self.limits = limits

    def open(self, session_id: object, stream_id: str, rate: int, audio: np.ndarray | None) -> np.ndarray:
        """Start session `session_id`; its first piece's samples. Raises RequestError (the first request is
        refused whole)."""
        if not session_id:
            raise RequestError("an audio-in session needs a sequence_id (non-zero)", param="input_sample_rate")
        session = AudioSession(session_id, stream_id, check_rate(rate), self.limits)
        try:
            samples = session.check(audio, None)
        except RequestError as exc:
            raise RequestError(str(exc).replace("; the piece is refused, the session goes on", ""),
                               param="input_audio", code="bad_input_audio") from None
        with self._lock:
            if session_id in self._live:
                raise RequestError(f"session {quoted(session_id)} is already live; a sequence_id names one "
                                   f"session at a time", param="input_sample_rate")
            session.take(samples, is_final=False)
            self._live[session_id] = session
            self._ended.pop(session_id, None)
        return samples

    def take(self, session_id: object, audio: np.ndarray | None, rate: int | None,
             is_final: bool) -> tuple[str, np.ndarray]:
        """A later piece: (its stream id, its samples). Raises RequestError naming why it is refused."""
        with self._lock:
            session = self._live.get(session_id)
            if session is None:
                raise self._not_live(session_id)
            if session.is_closed:
                raise RequestError(f"session {quoted(session_id)}'s input is closed (its sequence_end came); the "
                                   f"piece is refused", param="input_audio", code="session_closed")
            samples = session.check(audio, rate)
            session.take(samples, is_final)
            return session.stream_id, samples


@dataclass(frozen=True)
class InputWindow:
    """One chunk for the encoder: `audio` is its left context then the chunk; `new_frames` codec frames of the
    chunk follow the context's (`is_last`: the input's last chunk, maybe shorter; maybe none at all)."""

    audio: np.ndarray
    new_frames: int
    is_last: bool


class InputChunker:
    """A stream's input on the fixed grid (see the module's docstring). Only its stream's thread uses it."""

    def __init__(self, sample_rate: int, limits: AudioInLimits) -> None:
        self.sample_rate = sample_rate
        self.frame_samples = round(sample_rate / limits.frame_rate)
        self.chunk_samples = self.frame_samples * limits.chunk_frames
        self.context_samples = self.frame_samples * limits.context_frames
        self._audio = np.zeros(0, np.float32)  # from absolute sample `_origin` on
        self._origin = 0
        self._next = 0  # the next chunk's first sample (absolute)
        self._done = False

    def push(self, samples: np.ndarray, is_final: bool) -> list[InputWindow]:
        if self._done:
            return []
        self._audio = np.concatenate((self._audio, samples.astype(np.float32)))
        windows = []
        end = self._origin + self._audio.size
        while self._next + self.chunk_samples <= end:
            windows.append(self._window(self._next + self.chunk_samples, self.chunk_samples // self.frame_samples,
                                        is_last=is_final and self._next + self.chunk_samples == end))
            self._next += self.chunk_samples
        if is_final:
            if self._next < end or not windows:
                frames = math.ceil((end - self._next) / self.frame_samples)
                windows.append(self._window(end, frames, is_last=True))
                self._next = end
            self._done = True
        keep_from = max(self._origin, self._next - self.context_samples)
        self._audio, self._origin = self._audio[keep_from - self._origin:], keep_from
        return windows

    def _window(self, stop: int, new_frames: int, is_last: bool) -> InputWindow:
        start = max(0, self._next - self.context_samples)
        return InputWindow(self._audio[start - self._origin: stop - self._origin].copy(), new_frames, is_last)
