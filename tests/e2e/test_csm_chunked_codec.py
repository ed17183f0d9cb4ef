"""CSM through a real tritonserver: streamed audio (Mimi windows with 8 frames of left context,
across both lanes) against a full decode of the same frames (tolerance: tests/unit/test_csm_codec.py)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from backend_python.models import registry
from clients.stream import synthesize
from tests.e2e.test_streaming import TEXT, lm_tokens, num_frames

PRESET = "csm-tiny"
TOLERANCE = 1e-4  # the tiny Mimi's windows measured 9e-6 off a full decode


def test_streamed_audio_matches_full_decode(family):
    if family.preset != PRESET:
        pytest.skip(f"CSM only ({family.preset})")
    seed, seconds = 21, 4.8
    tokens = lm_tokens(family.url, seed, seconds)  # [60, 32], the same request's frames
    streamed = synthesize(family.url, TEXT, seed=seed, max_audio_seconds=seconds, ignore_eos=True)
    codec = registry.load_codec(registry.resolve(PRESET), device="cpu", dtype="float32")
    with torch.inference_mode():
        full = codec.decode(torch.from_numpy(tokens.astype(np.int64))[None])[0].numpy()
    assert tokens.shape == (num_frames(family, seconds), 32) and streamed.audio.shape == full.shape
    assert {c.lane for c in streamed.chunks} == {"urgent", "background"}  # windows decoded on both lanes
    np.testing.assert_allclose(streamed.audio, full, rtol=0, atol=TOLERANCE)
    assert np.abs(full).max() > 0.1
