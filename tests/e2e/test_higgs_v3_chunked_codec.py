"""Higgs Audio v3 through a real tritonserver: streamed audio (tokenizer-decoder windows across both lanes) against a
full decode of the same frames. The DAC decoder is not causal: each chunk's window holds 12 frames of context and
waits for 10 of lookahead, which hold its new samples within the unit test's tolerance of a full decode
(tests/unit/test_higgs_v3_family.py; with 2 frames of lookahead a chunk's end is off by ~0.26)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from backend_python.models import registry
from clients.stream import synthesize
from tests.e2e.test_streaming import TEXT, lm_tokens, num_frames

PRESET = "higgs-v3-tiny"
TOLERANCE = 1e-4


@pytest.mark.parametrize("family", [PRESET], indirect=True)  # the Higgs server of the family fixture
def test_streamed_audio_matches_a_full_decode(family):
    seed, seconds = 21, 4.0
    tokens = lm_tokens(family.url, seed, seconds)  # [100, 8]: complete frames, the delay pattern undone
    streamed = synthesize(family.url, TEXT, seed=seed, max_audio_seconds=seconds, ignore_eos=True)
    codec = registry.load_codec(registry.resolve(PRESET), device="cpu", dtype="float32")
    with torch.inference_mode():
        full = codec.decode(torch.from_numpy(tokens.astype(np.int64))[None])[0].numpy()
    assert tokens.shape == (num_frames(family, seconds), 8) and streamed.audio.shape == full.shape
    assert 0 <= tokens.min() and tokens.max() < 1024  # no begin/end-of-stream padding reaches the codec
    assert np.abs(streamed.audio - full).max() <= TOLERANCE
