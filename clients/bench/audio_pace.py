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


def input_samples(seconds: float) -> int:
    """The length of a request's input of `seconds`."""
    return max(1, round(seconds * SAMPLE_RATE))


def input_audio(seconds: float, seed: int) -> np.ndarray:
    """The request's input: seeded noise, [n] float32 at SAMPLE_RATE."""
    return (np.random.default_rng(seed).uniform(-1, 1, input_samples(seconds)) * 0.3).astype(np.float32)


def enrollment() -> np.ndarray:
    return (np.random.default_rng(0).uniform(-1, 1, round(ENROLL_S * SAMPLE_RATE)) * 0.3).astype(np.float32)


PIECE_SAMPLES = round(PIECE_S * SAMPLE_RATE)


def audio_pieces(audio: np.ndarray) -> list[np.ndarray]:
    return [audio[start:start + PIECE_SAMPLES] for start in range(0, audio.size, PIECE_SAMPLES)]


def piece_frames(num_samples: int) -> list[float]:
    """Input frames sent once each piece of an input of `num_samples` is out (cumulative; fractions of the last
    partial frame count): its pieces' ends, from the lengths alone."""
    ends = [*range(PIECE_SAMPLES, num_samples, PIECE_SAMPLES), num_samples]
    return [end * FRAME_RATE / SAMPLE_RATE for end in ends]


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
