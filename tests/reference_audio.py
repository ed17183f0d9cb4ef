"""A deterministic stand-in for a voice recording, synthesised in the test (no audio files are committed)."""
from __future__ import annotations

import numpy as np


def voiced(seconds: float = 2.0, rate: int = 16000, f0: float = 140.0, peak: float = 0.5) -> np.ndarray:
    """[n] float32: a few harmonics of `f0` with a slow vibrato, under a syllable-like envelope, scaled to `peak`."""
    t = np.arange(round(seconds * rate)) / rate
    phase = 2 * np.pi * f0 * t + 3.0 * np.sin(2 * np.pi * 5.0 * t)  # vibrato
    tone = sum(np.sin(k * phase) / k for k in (1, 2, 3, 4, 5))
    envelope = 0.55 + 0.45 * np.sin(2 * np.pi * 3.0 * t) ** 2  # ~6 syllables a second
    signal = tone * envelope
    return (peak * signal / np.max(np.abs(signal))).astype(np.float32)
