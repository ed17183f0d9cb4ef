"""Bytes on the wire: server-sent events (16-bit PCM and the WAV header: audio.pcm)."""
from __future__ import annotations

import base64
import json


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
