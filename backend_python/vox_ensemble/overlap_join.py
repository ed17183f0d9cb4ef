"""The seams between a stream's chunks, for a codec that returns audio past a chunk's new frames.

A codec with lookahead and overlap (models/base.py CodecWindowing) decodes each chunk's window with the frames
after it, and returns `overlap_frames` frames of audio past the chunk's new ones: its guess of how the next
chunk starts. Those samples are held back and cross-faded into the start of the stream's next chunk, so a
vocoder whose excitation does not carry from one window to the next (the phase of HiFT's sine source, say)
joins without a click. Every chunk still sends exactly its new frames' samples; a stream's last chunk has no
lookahead, so nothing is left over. Equal-power is not wanted here: the two signals are near copies, so the
fades are complementary (they sum to one), raised-cosine shaped.
"""
from __future__ import annotations

import numpy as np


class OverlapJoin:
    """One stream's held-back tail; `join` each chunk's audio in stream order."""

    def __init__(self) -> None:
        self._tail: np.ndarray | None = None

    def join(self, audio: np.ndarray, num_tail: int) -> np.ndarray:
        """`audio`: a chunk's new samples, then `num_tail` samples past them. Returns the new samples, their
        start cross-faded with the previous chunk's tail; keeps this chunk's tail for the next."""
        if not 0 <= num_tail <= audio.shape[0]:
            raise ValueError(f"a tail of {num_tail} samples does not fit {audio.shape[0]} samples of audio")
        new = audio[: audio.shape[0] - num_tail]
        if self._tail is not None and self._tail.shape[0] and new.shape[0]:
            new = new.copy()
            n = min(self._tail.shape[0], new.shape[0])
            fade_in = crossfade_weights(n)
            new[:n] = self._tail[:n] * (1.0 - fade_in) + new[:n] * fade_in
        self._tail = audio[audio.shape[0] - num_tail:].copy() if num_tail else None
        return new


def crossfade_weights(n: int) -> np.ndarray:
    """The incoming signal's weights over `n` samples, rising from near 0 to near 1 (raised cosine); the
    outgoing signal takes one minus them."""
    return (np.sin(0.5 * np.pi * (np.arange(n, dtype=np.float32) + 0.5) / n) ** 2).astype(np.float32)
