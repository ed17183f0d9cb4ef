"""Reference audio files in: a WAV, FLAC or Ogg (Vorbis, Opus, FLAC) file's bytes to mono float32 at its own rate.

PyAV (FFmpeg), torch-free: the gateway decodes an uploaded reference here and sends the samples to the server as
`ref_audio` with `ref_sample_rate`, which resamples them to its encoder's rate. Channels are averaged, whatever
their count. The same bytes always give the same samples, so a voice registered from a file and the same file
sent inline clone alike.

A hostile file costs little: its header's rate, channels and duration are checked against the server's own limits
(protocol.reference.ReferenceLimits: what the server would refuse is refused here, before a sample is decoded; a
59 s file at 192 kHz once became a 45 MB tensor that crossed Triton only to be refused there), and the samples go
into one buffer that never grows past the limit, whatever the header claims: decoding stops as soon as the audio
passes it. A reference's samples therefore take at most `max_ref_audio_s` x `max_rate` x 4 bytes (11.5 MB at 60 s
and 48 kHz) plus one frame. FFmpeg's planar frames keep at most 8 plane pointers (PyAV's `to_ndarray` read past
them and crashed on 8 channels or more): frames are converted to packed (interleaved) float32, one plane for any
channel count.
"""
from __future__ import annotations

import io
import math
from dataclasses import dataclass

import numpy as np

from protocol.reference import MAX_CHANNELS, ReferenceLimits

CONTAINERS = {"wav": "wav", "flac": "flac", "ogg": "ogg"}  # FFmpeg's demuxer name -> what we call the format
HEADER_SLACK_S = 0.5  # how far a header's duration may pass the limit (containers round it)


class AudioFileError(ValueError):
    """The bytes are not a reference file we take; `code` says why (`invalid_audio`, `unsupported_audio_format`)."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class DecodedAudio:
    samples: np.ndarray  # [n] float32 mono
    sample_rate: int
    format: str  # wav, flac or ogg


def decode_reference(data: bytes, limits: ReferenceLimits = ReferenceLimits()) -> DecodedAudio:
    """Decode a whole WAV, FLAC or Ogg file; AudioFileError when it is none of them, holds no audio, or breaks
    `limits` (the server's): its rate or channels, or a length past `max_ref_audio_s` (found from its header, or
    while decoding where the header says less than the file holds)."""
    import av
    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            fmt = _container_format(container)
            if not container.streams.audio:
                raise AudioFileError(f"the {fmt} file holds no audio stream", "invalid_audio")
            stream = container.streams.audio[0]
            if fmt == "wav":
                _check_wav_sample_size(data)
            if stream.codec_context is None:  # a format tag FFmpeg does not know (a WAV's, say)
                raise AudioFileError(f"the {fmt} file's audio codec is not one we can decode (WAV: PCM or IEEE "
                                     "float; FLAC; Ogg Vorbis or Opus)", "unsupported_audio_format")
            _check_header(container, stream, fmt, limits)
            samples = _decode_mono(container, stream, limits)
    except av.FFmpegError as exc:
        raise AudioFileError(f"the file is not audio we can read (WAV, FLAC or Ogg): {exc}", "invalid_audio") from None
    if samples.size == 0:
        raise AudioFileError(f"the {fmt} file holds no samples", "invalid_audio")
    return DecodedAudio(samples, int(stream.rate), fmt)


def _container_format(container) -> str:
    names = set(container.format.name.split(","))
    fmt = next((CONTAINERS[n] for n in names if n in CONTAINERS), None)
    if fmt is None:
        raise AudioFileError(f"the file is {container.format.long_name or container.format.name}; a reference must "
                             f"be {', '.join(sorted(set(CONTAINERS.values())))}", "unsupported_audio_format")
    return fmt


def _check_header(container, stream, fmt: str, limits: ReferenceLimits) -> None:
    """Rate, channels and (where the header gives it) duration, before a sample is decoded."""
    rate, channels = int(stream.rate or 0), int(stream.channels or 0)
    if rate < limits.min_rate:
        raise AudioFileError(f"the {fmt} file's sample rate is {rate} Hz; a reference must be {limits.min_rate}-"
                             f"{limits.max_rate} Hz", "invalid_audio")
    if rate > limits.max_rate:  # the server's code for the same refusal
        raise AudioFileError(f"the {fmt} file's sample rate is {rate} Hz; the server takes references of "
                             f"{limits.min_rate}-{limits.max_rate} Hz", "unsupported_ref_sample_rate")
    if not 1 <= channels <= MAX_CHANNELS:
        raise AudioFileError(f"the {fmt} file has {channels} channels; a reference has 1 to {MAX_CHANNELS}",
                             "invalid_audio")
    seconds = _header_seconds(container, stream)
    if seconds is not None and seconds > limits.max_ref_audio_s + HEADER_SLACK_S:
        raise AudioFileError(f"the {fmt} file is {seconds:.1f} s long; a reference is at most "
                             f"{limits.max_ref_audio_s:g} s", "audio_too_long")


WAV_PCM, WAV_FLOAT, WAV_EXTENSIBLE = 0x0001, 0x0003, 0xFFFE
WAV_BITS = {WAV_PCM: range(8, 33), WAV_FLOAT: (32, 64)}  # FFmpeg rounds a PCM size up to a whole byte: 12 -> 16


def _check_wav_sample_size(data: bytes) -> None:
    """Refuse a WAV whose `fmt ` chunk gives a sample size its format cannot have (FFmpeg reads 1-7 bit
    PCM as 8-bit, and would decode noise)."""
    fmt = _wav_fmt_chunk(data)
    if fmt is None or len(fmt) < 16:
        return  # FFmpeg read the header, so its layout is one we need not second-guess
    tag, bits = int.from_bytes(fmt[0:2], "little"), int.from_bytes(fmt[14:16], "little")
    if tag == WAV_EXTENSIBLE and len(fmt) >= 26:
        tag = int.from_bytes(fmt[24:26], "little")  # the sub-format GUID's first two bytes
    allowed = WAV_BITS.get(tag)
    if allowed is not None and bits not in allowed:
        kind = "PCM" if tag == WAV_PCM else "IEEE float"
        sizes = "8 to 32" if tag == WAV_PCM else "32 or 64"
        raise AudioFileError(f"the wav file says {bits} bits per sample; {kind} WAV has {sizes}",
                             "unsupported_audio_format")


def _wav_fmt_chunk(data: bytes) -> bytes | None:
    """The body of a RIFF/WAVE file's `fmt ` chunk, or None where there is none."""
    at = 12
    while at + 8 <= len(data):
        chunk_id, size = data[at:at + 4], int.from_bytes(data[at + 4:at + 8], "little")
        if chunk_id == b"fmt ":
            return data[at + 8:at + 8 + size]
        at += 8 + size + (size & 1)  # chunks are padded to an even length
    return None


def _header_seconds(container, stream) -> float | None:
    """The duration the header claims, or None where it says nothing."""
    if stream.duration is not None and stream.time_base is not None:
        return float(stream.duration * stream.time_base)
    if container.duration is not None:
        return container.duration / 1e6  # AV_TIME_BASE
    return None


def _decode_mono(container, stream, limits: ReferenceLimits) -> np.ndarray:
    """Every frame as packed float32 (FFmpeg converts the sample format), averaged over channels, into one buffer of
    at most the limit's samples (sized from the header's length where it gives one); AudioFileError as soon as the
    decoded audio passes the limit."""
    import av
    channels, rate = stream.channels, int(stream.rate)
    limit = limits.max_samples(rate) + int(HEADER_SLACK_S * rate)
    resampler = av.AudioResampler(format="flt", layout=stream.layout, rate=rate)
    samples = _Samples(min(limit, _header_samples(stream, rate) or limit), limit)  # no length: the limit
    for frame in container.decode(stream):
        for converted in resampler.resample(frame):
            samples.add(_mono(converted, channels), limits.max_ref_audio_s)
    for converted in resampler.resample(None):  # what the converter holds
        samples.add(_mono(converted, channels), limits.max_ref_audio_s)
    return samples.filled()


class _Samples:
    """A growing mono buffer that never holds more than `limit` samples."""

    def __init__(self, size: int, limit: int) -> None:
        self.buffer, self.limit, self.size = np.empty(max(size, 1), np.float32), limit, 0

    def add(self, part: np.ndarray, max_seconds: float) -> None:
        end = self.size + part.size
        if end > self.limit:
            raise AudioFileError(f"the audio goes on past {max_seconds:g} s, a reference's limit", "audio_too_long")
        if end > self.buffer.size:  # the header said less than the file holds: room up to the limit, at once
            grown = np.empty(self.limit, np.float32)
            grown[:self.size] = self.buffer[:self.size]
            self.buffer = grown
        self.buffer[self.size:end] = part
        self.size = end

    def filled(self) -> np.ndarray:
        """The samples added ([n] float32): a view of the buffer where it is (nearly) full, as when the header said
        the length; else a copy of its filled part (a view would keep the empty rest allocated)."""
        unused = self.buffer.size - self.size
        return self.buffer[:self.size] if unused <= self.buffer.size // 16 else self.buffer[:self.size].copy()


def _header_samples(stream, rate: int) -> int | None:
    """Samples of one channel the stream's header says it holds, or None where it says nothing (FFmpeg's estimate of
    a container's length from its bit rate is no statement: the buffer then starts at the limit)."""
    if stream.duration is None or stream.time_base is None:
        return None
    return math.ceil(float(stream.duration * stream.time_base) * rate) + 1


def _mono(frame, channels: int) -> np.ndarray:
    """A packed float32 frame ([1, n * channels] interleaved) -> [n] float32, the channels' mean."""
    interleaved = frame.to_ndarray().reshape(-1, channels)
    return interleaved.mean(axis=1, dtype=np.float64).astype(np.float32) if channels > 1 else interleaved[:, 0].copy()
