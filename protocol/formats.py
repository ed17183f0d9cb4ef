"""The audio formats and output rates a client may ask for, of `vox_ensemble` and of the gateway (a table only:
encoding lives in `audio/encoders.py`)."""
from __future__ import annotations

from dataclasses import dataclass

SAMPLE_RATES = (8000, 16000, 22050, 24000, 44100, 48000)  # what `sample_rate` may ask for
OPUS_RATES = (8000, 16000, 24000, 48000)  # libopus takes only these (and 12000) as its input rate


@dataclass(frozen=True)
class AudioFormat:
    """One `response_format`: its HTTP type and, for compressed ones, PyAV's muxer and encoder."""

    name: str
    content_type: str
    container: str | None = None  # None: 16-bit PCM written by the gateway itself (pcm, wav)
    codec: str | None = None
    sample_rates: tuple[int, ...] = SAMPLE_RATES
    bit_rate: int | None = None  # bits/s of mono speech (LAME's own default is ~10 kbit/s at 8 kHz)
    is_lossless: bool = False  # fed the 16-bit samples `pcm` sends, so it decodes to exactly those

    @property
    def is_compressed(self) -> bool:
        return self.container is not None


FORMATS = {f.name: f for f in (
    AudioFormat("wav", "audio/wav"),
    AudioFormat("pcm", "audio/pcm"),
    AudioFormat("mp3", "audio/mpeg", "mp3", "libmp3lame", bit_rate=64_000),  # the most MPEG-2.5 (8 kHz) allows
    AudioFormat("opus", "audio/ogg", "ogg", "libopus", OPUS_RATES, 64_000),  # Ogg Opus, as OpenAI sends it
    AudioFormat("aac", "audio/aac", "adts", "aac", bit_rate=64_000),  # ADTS: playable from any frame, no index
    AudioFormat("flac", "audio/flac", "flac", "flac", is_lossless=True),
)}

PCM_F32 = "pcm_f32"  # Triton's own: FP32 samples in the `audio` output, no encoder
TRITON_FORMATS = (PCM_F32, *FORMATS)  # what `vox_ensemble`'s `audio_format` input may ask for
