"""Zonos through a real tritonserver: streamed audio (DAC windows across both lanes, each with 10 frames of left
context and 10 of lookahead, DAC's whole receptive field: tests/unit/test_zonos_codec.py) against a full decode of
the same frames: the whole stream matches."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from backend_python.models import registry
from clients.stream import synthesize
from tests.e2e.test_streaming import TEXT, lm_tokens, num_frames

PRESET = "zonos-tiny"
TOLERANCE = 1e-4  # the tiny codec's output std is ~0.1


@pytest.mark.parametrize("family", [PRESET], indirect=True)  # the Zonos server of the family fixture
def test_streamed_audio_matches_a_full_decode(family):
    seed, seconds = 21, 2.0
    tokens = lm_tokens(family.url, seed, seconds)  # [172, 9]
    streamed = synthesize(family.url, TEXT, seed=seed, max_audio_seconds=seconds, ignore_eos=True)
    codec = registry.load_codec(registry.resolve(PRESET), device="cpu", dtype="float32")
    with torch.inference_mode():
        full = codec.decode(torch.from_numpy(tokens.astype(np.int64))[None])[0].numpy()
    assert tokens.shape == (num_frames(family, seconds), 9) and streamed.audio.shape == full.shape
    assert len(streamed.chunks) >= 4  # 6, 9, 14, 21, 32, 43, ... frames: several windows, both lanes possible
    assert np.abs(streamed.audio - full).max() <= TOLERANCE
