"""Reference audio files in: a WAV, FLAC or Ogg (Vorbis, Opus, FLAC) file's bytes to mono float32 at its own rate.

PyAV (FFmpeg), torch-free: the gateway decodes an uploaded reference here and sends the samples to the server as
`ref_audio` with `ref_sample_rate`, which resamples them to its encoder's rate. Channels are averaged, whatever
their count. The same bytes always give the same samples, so a voice registered from a file and the same file
sent inline clone alike.

A hostile file costs little: its header's rate, channels and duration are checked before any decoding, and
decoding stops as soon as the audio passes `max_seconds` (the server's limit on a reference), so a small file
whose header promises hours never becomes gigabytes of samples. FFmpeg's planar frames keep at most 8 plane
pointers (PyAV's `to_ndarray` read past them and crashed on 8 channels or more): frames are converted to packed
(interleaved) float32, one plane for any channel count.
"""
from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np

CONTAINERS = {"wav": "wav", "flac": "flac", "ogg": "ogg"}  # FFmpeg's demuxer name -> what we call the format
MAX_SECONDS = 60.0  # the server's limit on a reference (ReferenceLimits.max_ref_audio_s)
MIN_RATE, MAX_RATE = 8_000, 192_000  # rates a reference file may have (the server resamples from 8-48 kHz)
MAX_CHANNELS = 64


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


def decode_reference(data: bytes, max_seconds: float = MAX_SECONDS) -> DecodedAudio:
    """Decode a whole WAV, FLAC or Ogg file; AudioFileError when it is none of them, holds no audio, or is longer
    than `max_seconds` (found from its header, or while decoding where the header does not say)."""
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
            _check_header(container, stream, fmt, max_seconds)
            samples = _decode_mono(container, stream, max_seconds)
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


def _check_header(container, stream, fmt: str, max_seconds: float) -> None:
    """Rate, channels and (where the header gives it) duration, before a sample is decoded."""
    rate, channels = int(stream.rate or 0), int(stream.channels or 0)
    if not MIN_RATE <= rate <= MAX_RATE:
        raise AudioFileError(f"the {fmt} file's sample rate is {rate} Hz; a reference must be {MIN_RATE}-{MAX_RATE} Hz",
                             "invalid_audio")
    if not 1 <= channels <= MAX_CHANNELS:
        raise AudioFileError(f"the {fmt} file has {channels} channels; a reference has 1 to {MAX_CHANNELS}",
                             "invalid_audio")
    seconds = _header_seconds(container, stream)
    if seconds is not None and seconds > max_seconds + 0.5:
        raise AudioFileError(f"the {fmt} file is {seconds:.1f} s long; a reference is at most {max_seconds:g} s",
                             "audio_too_long")


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


def _decode_mono(container, stream, max_seconds: float) -> np.ndarray:
    """Every frame as packed float32 (FFmpeg converts the sample format), averaged over channels; AudioFileError
    as soon as the decoded audio passes max_seconds."""
    import av
    channels = stream.channels
    resampler = av.AudioResampler(format="flt", layout=stream.layout, rate=stream.rate)
    parts, num_samples, limit = [], 0, int((max_seconds + 0.5) * stream.rate)
    for frame in container.decode(stream):
        for converted in [*resampler.resample(frame)]:
            parts.append(_mono(converted, channels))
            num_samples += parts[-1].size
        if num_samples > limit:
            raise AudioFileError(f"the audio goes on past {max_seconds:g} s, a reference's limit", "audio_too_long")
    parts += [_mono(converted, channels) for converted in resampler.resample(None)]  # what the converter holds
    return np.concatenate(parts) if parts else np.zeros(0, np.float32)


def _mono(frame, channels: int) -> np.ndarray:
    """A packed float32 frame ([1, n * channels] interleaved) -> [n] float32, the channels' mean."""
    interleaved = frame.to_ndarray().reshape(-1, channels)
    return interleaved.mean(axis=1, dtype=np.float64).astype(np.float32) if channels > 1 else interleaved[:, 0].copy()
