"""One stream's audio as its client asked for it: each chunk time-stretched (`speed`), resampled and encoded as it
passes.

The encoder (and resampler) is made at the stream's first chunk, when the codec's rate is known.
A chunk marked last flushes them into its own piece; a stream that ended without a chunk marked last
(the LM learnt of its end one step after it sent its last chunk) gets what they held back from
`tail()`. A stream with no chunk sends no bytes at all.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from audio.encoders import ChunkEncoder, Resampler
from protocol.formats import FORMATS, PCM_F32
from audio.tempo import TempoStream

NO_SAMPLES = np.zeros(0, np.float32)


@dataclass(frozen=True)
class AudioPiece:
    """What one response carries: FP32 samples ([0] with an encoded format), the encoded bytes
    (None with `pcm_f32`) and the rate of the audio sent."""

    audio: np.ndarray  # [n] float32
    data: bytes | None
    sample_rate: int


class StreamAudio:
    def __init__(self, audio_format: str = PCM_F32, sample_rate: int | None = None, speed: float = 1.0) -> None:
        self._format, self._rate, self.speed = audio_format, sample_rate, speed
        self._tempo: TempoStream | None = None
        self._encoder: ChunkEncoder | None = None
        self._resampler: Resampler | None = None
        self._out_rate: int | None = None
        self._is_open = False  # a chunk went through and nothing was flushed yet

    @property
    def is_passthrough(self) -> bool:
        """FP32 at the model's rate and speed: chunks go out exactly as decoded."""
        return self._format == PCM_F32 and self._rate is None and self.speed == 1.0

    def process(self, audio: np.ndarray, source_rate: int, is_last: bool = False) -> AudioPiece:
        """One chunk's piece (audio: [n] float32 at `source_rate`); `is_last` flushes the encoder into it."""
        if self._out_rate is None:
            self._open(source_rate)
        if self._tempo is not None:
            audio = self._tempo.process(audio, is_last)
        if self._encoder is not None:
            data = self._encoder.encode(audio) + (self._encoder.finish() if is_last else b"")
            piece = AudioPiece(NO_SAMPLES, data, self._out_rate)
        else:
            samples = self._resampler.process(audio, is_last) if self._resampler else audio
            piece = AudioPiece(samples, None, self._out_rate)
        self._is_open = self._is_open and not is_last
        return piece

    def tail(self) -> AudioPiece | None:
        """What the encoder and resampler still hold when the stream ended without a last chunk; None if nothing."""
        if not self._is_open or self.is_passthrough:
            return None
        self._is_open = False
        held = self._tempo.process(NO_SAMPLES, is_last=True) if self._tempo is not None else NO_SAMPLES
        if self._encoder is not None:
            return AudioPiece(NO_SAMPLES, self._encoder.encode(held) + self._encoder.finish(), self._out_rate)
        if self._resampler is not None:
            return AudioPiece(self._resampler.process(held, is_last=True), None, self._out_rate)
        return AudioPiece(held, None, self._out_rate)

    def _open(self, source_rate: int) -> None:
        self._out_rate = self._rate or source_rate
        self._is_open = True
        if self.speed != 1.0:
            self._tempo = TempoStream(source_rate, self.speed)
        if self._format != PCM_F32:
            self._encoder = ChunkEncoder(FORMATS[self._format], source_rate, self._out_rate)
        elif self._out_rate != source_rate:
            self._resampler = Resampler(source_rate, self._out_rate)
