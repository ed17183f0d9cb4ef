"""Zonos clones a voice from its speaker embedding through a real tritonserver: the reference audio goes through
the voice-encoder lane (the reference's speaker model, `models/zonos/speaker.py`), its 128-d vector takes the
speaker's place in the prefix; a whole text and a streamed one. The reference audio is synthesised here."""
from __future__ import annotations

import numpy as np
import pytest

from clients.stream import synthesize
from clients.text_stream import speak_streaming_text
from tests.e2e.test_streaming import TEXT, num_frames
from tests.e2e.test_text_stream import words
from tests.reference_audio import voiced

PRESET = "zonos-tiny"
RATE = 16000  # the speaker model's own rate


def clone(url: str, reference: np.ndarray, seed: int = 3, seconds: float = 0.8, **inputs):
    return synthesize(url, TEXT, seed=seed, max_audio_seconds=seconds, ignore_eos=True, ref_audio=reference,
                      ref_sample_rate=RATE, x_vector_only=True, **inputs)


@pytest.mark.parametrize("family", [PRESET], indirect=True)  # the Zonos server of the family fixture
def test_a_reference_clones_through_the_encoder_lane(family):
    low, high = voiced(2.0, RATE, f0=140.0), voiced(2.0, RATE, f0=260.0)
    first, again, other = clone(family.url, low), clone(family.url, low), clone(family.url, high)
    plain = synthesize(family.url, TEXT, seed=3, max_audio_seconds=0.8, ignore_eos=True)
    assert [c.index for c in first.chunks] == list(range(len(first.chunks)))
    assert first.audio.size == num_frames(family, 0.8) * family.samples_per_frame
    np.testing.assert_allclose(first.audio, again.audio, rtol=0, atol=1e-4)
    assert not np.allclose(first.audio, other.audio, atol=1e-3)  # another voice
    assert not np.allclose(first.audio, plain.audio, atol=1e-3)  # not the default speaker


@pytest.mark.parametrize("family", [PRESET], indirect=True)
def test_a_streamed_text_clones_in_every_segment(family):
    session = dict(seed=1, max_audio_seconds=2.0, ignore_eos=True)
    text = "Get the trust fund to the bank early. Then wait."
    cloned = speak_streaming_text(family.url, words(text, pause_s=0.05), ref_audio=voiced(2.0, RATE, f0=140.0),
                                  ref_sample_rate=RATE, x_vector_only=True, **session)
    plain = speak_streaming_text(family.url, words(text, pause_s=0.05), **session)
    assert cloned.piece_errors == [] and [c.index for c in cloned.chunks] == list(range(len(cloned.chunks)))
    assert cloned.audio.size == num_frames(family, 2.0) * family.samples_per_frame
    assert not np.allclose(cloned.audio, plain.audio, atol=1e-3)
