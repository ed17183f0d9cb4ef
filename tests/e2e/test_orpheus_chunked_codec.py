"""Orpheus through a real tritonserver: streamed audio (SNAC windows across both lanes) against a
full decode of the same frames. SNAC is not causal: each chunk waits for 2 frames of lookahead,
which make it match a full decode but for a small error at its end (tolerances:
tests/unit/test_orpheus_codec.py; without lookahead the chunk ends were off by up to 0.37)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from backend_python.models import registry
from clients.stream import synthesize
from tests.e2e.test_streaming import TEXT, chunk_frames, lm_tokens, num_frames

PRESET = "orpheus-tiny"
EDGE_FRAMES = 3  # the decoder reaches ~2.3 frames to the right
EXACT_TOLERANCE = 1e-4
EDGE_TOLERANCE = 1e-4  # tiny codec with 2 frames of lookahead: measured max 8.4e-6 on random codes (0.365 without)


@pytest.mark.parametrize("family", [PRESET], indirect=True)  # the Orpheus server of the family fixture
def test_streamed_audio_matches_full_decode_but_for_chunk_ends(family):
    seed, seconds = 21, 4.0
    tokens = lm_tokens(family.url, seed, seconds)  # [47, 7]
    streamed = synthesize(family.url, TEXT, seed=seed, max_audio_seconds=seconds, ignore_eos=True)
    codec = registry.load_codec(registry.resolve(PRESET), device="cpu", dtype="float32")
    with torch.inference_mode():
        full = codec.decode(torch.from_numpy(tokens.astype(np.int64))[None])[0].numpy()
    assert tokens.shape == (num_frames(family, seconds), 7) and streamed.audio.shape == full.shape
    edge = np.zeros(full.shape, dtype=bool)
    for end in np.cumsum(chunk_frames(tokens.shape[0]))[:-1]:  # the last chunk ends with the utterance
        edge[max(0, end - EDGE_FRAMES) * family.samples_per_frame:end * family.samples_per_frame] = True
    error = np.abs(streamed.audio - full)
    assert error[~edge].max() <= EXACT_TOLERANCE
    assert error[edge].max() <= EDGE_TOLERANCE
