"""Streamed audio (both codec lanes; the background lane keeps each stream's decoder state) against a full
decode of the same tokens."""
from __future__ import annotations

import numpy as np
import torch

from backend_python.models import registry
from clients.stream import synthesize
from tests.e2e.test_streaming import TEXT, lm_tokens

SPF = 1920  # samples per 12.5 Hz frame at 24 kHz
EXACT_FRAMES = 32  # chunks 0..3 (2 + 10 + 10 + 10 frames) still see their whole history as context
EXACT_TOLERANCE = 1e-4
# Later chunks see 25 frames of left context (the reference's streaming setting); the tiny
# random codec's receptive field is longer, so they only approximate a full decode: measured
# max error 3.4e-2 to 4.7e-2 on this codec (BENCHMARKS.md, "Codec windows").
WINDOW_TOLERANCE = 0.1
# The background lane continues each stream from its decoder state. A stream's first background chunk
# builds that state from its window, which still holds the whole history while it starts within the
# context (25 frames); from there, while the chunks stay on that lane, the stream is a full decode up to
# float rounding (measured on the model: 2.2e-6, tests/unit/test_codec_stream.py).
CONTEXT_FRAMES = 25
STATE_TOLERANCE = 1e-4


def test_streamed_audio_matches_full_decode(url, model_cache):
    seed, seconds = 21, 4.8
    tokens = lm_tokens(url, seed, seconds)  # [60, K], the same request's frames
    streamed = synthesize(url, TEXT, seed=seed, max_audio_seconds=seconds, ignore_eos=True)
    codec = registry.load_codec(registry.resolve("qwen3-tts-tiny"), device="cpu", dtype="float32")
    with torch.inference_mode():
        full = codec.decode(torch.from_numpy(tokens.astype(np.int64))[None])[0].numpy()
    assert tokens.shape == (60, codec.num_codebooks) and streamed.audio.shape == full.shape
    split = EXACT_FRAMES * SPF
    np.testing.assert_allclose(streamed.audio[:split], full[:split], rtol=0, atol=EXACT_TOLERANCE)
    np.testing.assert_allclose(streamed.audio[split:], full[split:], rtol=0, atol=WINDOW_TOLERANCE)
    lanes = [c.lane for c in streamed.chunks]
    starts = np.cumsum([0] + [c.audio.size // SPF for c in streamed.chunks])  # each chunk's first frame
    first = next(i for i, lane in enumerate(lanes) if lane == "background")
    assert starts[first] <= CONTEXT_FRAMES, f"lanes {lanes}: the background lane started past the context"
    run_end = next((i for i in range(first, len(lanes)) if lanes[i] != "background"), len(lanes))
    end = starts[run_end] * SPF
    assert end > split, f"lanes {lanes}: no background chunk past frame {EXACT_FRAMES} to check the stream state"
    np.testing.assert_allclose(streamed.audio[:end], full[:end], rtol=0, atol=STATE_TOLERANCE)
