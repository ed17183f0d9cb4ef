"""Streamed input audio (`voxlane bench --audio-in-rate`): each request an audio-in session (docs/STREAMING.md,
"Streaming audio in") whose input is sent in 80-ms pieces at `audio_in_rate` times real time, and which of that
input a chunk of output needs.

The bench has no recordings of mixtures: a request's input is seeded noise as long as the audio it asks for (the
workload's utterance), its target speaker's enrollment a fixed one-second clip. What a chunk needs: the LM reads
its input in chunks of INPUT_CHUNK_FRAMES frames (the router's grid, `AudioInLimits.chunk_frames`) and writes the
output chunk that answers each once it has read it, so output frames [a, b) need input frames up to b rounded up
to a whole input chunk, and the input's last, shorter chunk needs the close. A chunk's *algorithmic latency* is
its arrival less the moment the input it needs had been sent.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

SAMPLE_RATE = 24000
FRAME_RATE = 12.5
PIECE_S = 0.08  # a microphone's 80-ms buffers
INPUT_CHUNK_FRAMES = 4  # the router's default grid (vox_ensemble/audio_sessions.py AudioInLimits)
ENROLL_S = 1.0


def input_audio(seconds: float, seed: int) -> np.ndarray:
    """The request's input: seeded noise, [n] float32 at SAMPLE_RATE."""
    return (np.random.default_rng(seed).uniform(-1, 1, max(1, round(seconds * SAMPLE_RATE))) * 0.3).astype(np.float32)


def enrollment() -> np.ndarray:
    return (np.random.default_rng(0).uniform(-1, 1, round(ENROLL_S * SAMPLE_RATE)) * 0.3).astype(np.float32)


def audio_pieces(audio: np.ndarray) -> list[np.ndarray]:
    size = round(PIECE_S * SAMPLE_RATE)
    return [audio[start:start + size] for start in range(0, audio.size, size)]


def piece_frames(pieces: list[np.ndarray]) -> list[float]:
    """Input frames sent once each piece is out (cumulative; fractions of the last partial frame count)."""
    sizes = np.cumsum([p.size for p in pieces]) if pieces else np.zeros(0)
    return [float(n) * FRAME_RATE / SAMPLE_RATE for n in sizes]


def audio_offsets(num_pieces: int, audio_in_rate: float) -> list[float]:
    """Seconds after the start at which each piece goes out: at `audio_in_rate` times real time."""
    return [k * PIECE_S / audio_in_rate for k in range(num_pieces)]


def input_sent_by(piece_sent_s: Sequence[float], frames: Sequence[float], closed_s: float | None,
                  end_frame: int) -> float:
    """When the input that output frames [a, `end_frame`) need had been sent; inf if it never was."""
    needed = math.ceil(end_frame / INPUT_CHUNK_FRAMES) * INPUT_CHUNK_FRAMES
    total = frames[-1] if frames else 0.0
    if needed > math.floor(total / INPUT_CHUNK_FRAMES) * INPUT_CHUNK_FRAMES:  # the last, shorter chunk: the close
        return math.inf if closed_s is None else closed_s
    return next(sent for sent, sent_frames in zip(piece_sent_s, frames) if sent_frames >= needed - 1e-9)
