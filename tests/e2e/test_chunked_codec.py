"""Streamed audio (windowed codec decoding across both lanes) matches a full decode of the same tokens."""
from __future__ import annotations

import numpy as np
import torch

from backend_python.models import registry
from clients.stream import synthesize
from tests.e2e.test_streaming import TEXT, lm_tokens

# Windowed decoding with the codec's left context (25 frames) is an approximation
# of a full decode; on the tiny random codec the error measured ~1e-6 (see BENCHMARKS.md).
TOLERANCE = 1e-4


def test_streamed_audio_matches_full_decode(url, model_cache):
    seed = 21
    tokens = lm_tokens(url, seed)  # [20, 16], the same request's frames
    streamed = synthesize(url, TEXT, seed=seed, max_audio_seconds=1.6, ignore_eos=True)
    codec = registry.load_codec(registry.resolve("qwen3-tts-tiny"), device="cpu", dtype="float32")
    with torch.inference_mode():
        full = codec.decode(torch.from_numpy(tokens.astype(np.int64))[None])[0].numpy()
    assert streamed.audio.shape == full.shape
    assert len(streamed.chunks) == 3 and {c.lane for c in streamed.chunks} >= {"urgent"}
    np.testing.assert_allclose(streamed.audio, full, rtol=0, atol=TOLERANCE)
