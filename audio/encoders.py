"""Audio encoded chunk by chunk as it streams: resampled with soxr, compressed with PyAV (FFmpeg).

Each chunk that arrives from Triton goes through at once and whatever bytes the encoder and muxer have
ready go out with it; `finish()` drains the resampler's and the encoder's delay at the end of the stream.
The muxers write to a sink with no `seek`, so none of them goes back to patch a header (the WAV and FLAC
headers say "length unknown").
"""
from __future__ import annotations

import numpy as np

from protocol.formats import AudioFormat
from audio.pcm import pcm16, wav_header

# muxer options: hand each packet to the sink at once; Ogg pages of at most 20 ms instead of 1 s
MUX_OPTIONS = {"flush_packets": "1"}
OGG_OPTIONS = {"page_duration": "20000"}


class Resampler:
    """float32 mono from `source_rate` to `rate`, in pieces (soxr's streaming resampler keeps the state)."""

    def __init__(self, source_rate: int, rate: int) -> None:
        import soxr
        self.stream = soxr.ResampleStream(source_rate, rate, 1, dtype="float32", quality="HQ")

    def process(self, audio: np.ndarray, is_last: bool = False) -> np.ndarray:
        return self.stream.resample_chunk(np.ascontiguousarray(audio, dtype=np.float32), last=bool(is_last))


class _Sink:
    """A write-only file for PyAV: collects what the muxer writes until it is taken."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def write(self, data) -> int:
        self.parts.append(bytes(data))
        return len(data)

    def take(self) -> bytes:
        data = b"".join(self.parts)
        self.parts.clear()
        return data


class PcmEncoder:
    """pcm: 16-bit little-endian samples; wav: the same after a RIFF header of unknown length."""

    def __init__(self, fmt: AudioFormat, rate: int) -> None:
        self._prefix = wav_header(rate) if fmt.name == "wav" else b""

    def encode(self, audio: np.ndarray) -> bytes:
        data, self._prefix = self._prefix + pcm16(audio), b""
        return data

    def finish(self) -> bytes:
        data, self._prefix = self._prefix, b""  # a stream with no audio still gets its header
        return data


class AvEncoder:
    """A compressed format through PyAV's muxer and encoder, one mono stream at `rate`."""

    def __init__(self, fmt: AudioFormat, rate: int) -> None:
        import av
        self._av, self.rate, self._sink = av, rate, _Sink()
        self._is_lossless = fmt.is_lossless
        options = {**MUX_OPTIONS, **(OGG_OPTIONS if fmt.container == "ogg" else {})}
        self._container = av.open(self._sink, "w", format=fmt.container, options=options)
        self._stream = self._container.add_stream(fmt.codec, rate=rate, layout="mono")
        if fmt.bit_rate:
            self._stream.bit_rate = fmt.bit_rate

    def encode(self, audio: np.ndarray) -> bytes:
        if audio.size:
            self._mux(self._stream.encode(self._frame(audio)))  # PyAV re-frames to the codec's frame size
        return self._sink.take()

    def _frame(self, audio: np.ndarray):
        if self._is_lossless:  # quantised as `pcm` is, not by FFmpeg's own rounding
            samples, sample_format = np.frombuffer(pcm16(audio), "<i2"), "s16"
        else:
            samples, sample_format = np.ascontiguousarray(audio, np.float32), "flt"
        frame = self._av.AudioFrame.from_ndarray(samples.reshape(1, -1), format=sample_format, layout="mono")
        frame.sample_rate = self.rate
        return frame

    def finish(self) -> bytes:
        self._mux(self._stream.encode(None))
        self._container.close()
        return self._sink.take()

    def _mux(self, packets) -> None:
        for packet in packets:
            self._container.mux(packet)


class ChunkEncoder:
    """One response's audio: resampled when the request asks for another rate, then encoded."""

    def __init__(self, fmt: AudioFormat, source_rate: int, rate: int | None = None) -> None:
        self.rate = rate or source_rate
        self._resampler = Resampler(source_rate, self.rate) if self.rate != source_rate else None
        self._encoder = AvEncoder(fmt, self.rate) if fmt.is_compressed else PcmEncoder(fmt, self.rate)

    def encode(self, audio: np.ndarray) -> bytes:
        """The bytes of one chunk (audio: [n] float32 at the source rate); may be short by the codec's delay."""
        return self._encoder.encode(self._resampler.process(audio) if self._resampler else audio)

    def finish(self) -> bytes:
        """The last bytes: what the resampler and encoder held back."""
        tail = self._encoder.encode(self._resampler.process(np.zeros(0, np.float32), is_last=True)) \
            if self._resampler else b""
        return tail + self._encoder.finish()
