"""Voxtral-TTS through a real tritonserver: streamed audio (codec windows with 25 frames of left context, across
both lanes) against a full decode of the same frames (tolerance: tests/unit/test_voxtral_family.py)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from backend_python.models import registry
from clients.stream import synthesize
from tests.e2e.test_streaming import TEXT, lm_tokens, num_frames

PRESET = "voxtral-tiny"
TOLERANCE = 1e-4  # the causal decoder's windows measured under 1e-6 off a full decode on the CPU


def test_streamed_audio_matches_full_decode(family):
    if family.preset != PRESET:
        pytest.skip(f"Voxtral-TTS only ({family.preset})")
    seed, seconds = 21, 4.8
    tokens = lm_tokens(family.url, seed, seconds)  # [60, 37], the same request's frames
    streamed = synthesize(family.url, TEXT, seed=seed, max_audio_seconds=seconds, ignore_eos=True)
    codec = registry.load_codec(registry.resolve(PRESET), device="cpu", dtype="float32")
    with torch.inference_mode():
        full = codec.decode(torch.from_numpy(tokens.astype(np.int64))[None])[0].numpy()
    assert tokens.shape == (num_frames(family, seconds), 37) and streamed.audio.shape == full.shape
    assert {c.lane for c in streamed.chunks} == {"urgent", "background"}  # windows decoded on both lanes
    np.testing.assert_allclose(streamed.audio, full, rtol=0, atol=TOLERANCE)
    assert np.abs(full).max() > 0.01
