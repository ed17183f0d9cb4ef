"""Bytes on the wire: 16-bit PCM, a streaming WAV header, server-sent events."""
from __future__ import annotations

import base64
import json
import struct

import numpy as np

UNKNOWN_SIZE = 0xFFFFFFFF  # RIFF and data sizes of a stream whose length is not known yet
DEFAULT_SAMPLE_RATE = 24000  # OpenAI's PCM rate; used only when a stream ends before its first chunk


def pcm16(audio: np.ndarray) -> bytes:
    """float32 in [-1, 1] → 16-bit signed little-endian, as `StreamResult.write_wav` quantises."""
    return (np.clip(audio, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()


def wav_header(sample_rate: int, num_channels: int = 1, bits: int = 16) -> bytes:
    """A RIFF/WAVE header for a stream of unknown length (the sizes are 0xFFFFFFFF)."""
    block = num_channels * bits // 8
    fmt = struct.pack("<HHIIHH", 1, num_channels, sample_rate, sample_rate * block, block, bits)
    return (b"RIFF" + struct.pack("<I", UNKNOWN_SIZE) + b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt
            + b"data" + struct.pack("<I", UNKNOWN_SIZE))


def sse_event(payload: dict) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def audio_delta(data: bytes, chunk: dict | None = None) -> bytes:
    """OpenAI's `speech.audio.delta`: the next bytes of the same stream `stream_format=audio` sends.

    VoxLane adds the Triton chunk the bytes came with (`chunk_index`, `lane`); the end-of-stream bytes
    of a codec's delay belong to no chunk."""
    return sse_event({"type": "speech.audio.delta", "audio": base64.b64encode(data).decode(), **(chunk or {})})


def audio_done(num_input_chars: int, num_chunks: int) -> bytes:
    """OpenAI's `speech.audio.done`; VoxLane counts characters in and audio chunks out (no billing)."""
    usage = {"input_tokens": num_input_chars, "output_tokens": num_chunks, "total_tokens": num_input_chars + num_chunks}
    return sse_event({"type": "speech.audio.done", "usage": usage})


def error_event(error: dict) -> bytes:
    """An error after the stream started (the status line is already sent): OpenAI's `error` event."""
    return sse_event({"type": "error", **error})
