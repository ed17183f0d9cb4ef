"""Reference audio files in: a WAV, FLAC or Ogg (Vorbis, Opus, FLAC) file's bytes to mono float32 at its own rate.

PyAV (FFmpeg), torch-free: the gateway decodes an uploaded reference here and sends the samples to the server as
`ref_audio` with `ref_sample_rate`, which resamples them to its encoder's rate. Channels are averaged. The same
bytes always give the same samples, so a voice registered from a file and the same file sent inline clone alike.
"""
from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np

CONTAINERS = {"wav": "wav", "flac": "flac", "ogg": "ogg"}  # FFmpeg's demuxer name -> what we call the format
MAX_DECODED_S = 600.0  # stop decoding past this (the server's own limit on a reference is far lower)


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


def decode_reference(data: bytes) -> DecodedAudio:
    """Decode a whole WAV, FLAC or Ogg file; AudioFileError when it is none of them, or holds no audio."""
    import av
    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            fmt = _container_format(container)
            if not container.streams.audio:
                raise AudioFileError(f"the {fmt} file holds no audio stream", "invalid_audio")
            stream = container.streams.audio[0]
            samples = _decode_mono(container, stream)
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


def _decode_mono(container, stream) -> np.ndarray:
    """Every frame as planar float32 (FFmpeg converts the sample format), averaged over channels."""
    import av
    resampler = av.AudioResampler(format="fltp", layout=stream.layout, rate=stream.rate)
    parts, num_samples, limit = [], 0, int(MAX_DECODED_S * stream.rate)
    for frame in container.decode(stream):
        for converted in resampler.resample(frame):
            planes = converted.to_ndarray()  # [channels, n]
            parts.append(planes.mean(axis=0, dtype=np.float64).astype(np.float32) if planes.shape[0] > 1
                         else planes[0].astype(np.float32))
            num_samples += planes.shape[1]
        if num_samples > limit:
            break
    for converted in resampler.resample(None):  # what the converter still holds
        planes = converted.to_ndarray()
        parts.append(planes.mean(axis=0).astype(np.float32))
    return np.concatenate(parts) if parts else np.zeros(0, np.float32)
