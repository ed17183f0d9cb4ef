"""16-bit PCM and a streaming WAV header: the bytes `pcm` and `wav` send."""
from __future__ import annotations

import struct

import numpy as np

UNKNOWN_SIZE = 0xFFFFFFFF  # RIFF and data sizes of a stream whose length is not known yet


def pcm16(audio: np.ndarray) -> bytes:
    """float32 in [-1, 1] → 16-bit signed little-endian, as `StreamResult.write_wav` quantises."""
    return (np.clip(audio, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()


def wav_header(sample_rate: int, num_channels: int = 1, bits: int = 16) -> bytes:
    """A RIFF/WAVE header for a stream of unknown length (the sizes are 0xFFFFFFFF)."""
    block = num_channels * bits // 8
    fmt = struct.pack("<HHIIHH", 1, num_channels, sample_rate, sample_rate * block, block, bits)
    return (b"RIFF" + struct.pack("<I", UNKNOWN_SIZE) + b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt
            + b"data" + struct.pack("<I", UNKNOWN_SIZE))


WAV_HEADER_BYTES = 44  # wav_header's


def with_wav_sizes(wav: bytes) -> bytes:
    """A whole WAV file that starts with `wav_header`, its RIFF and data sizes set to what it holds."""
    riff, data = struct.pack("<I", len(wav) - 8), struct.pack("<I", len(wav) - WAV_HEADER_BYTES)
    return wav[:4] + riff + wav[8:WAV_HEADER_BYTES - 4] + data + wav[WAV_HEADER_BYTES:]
