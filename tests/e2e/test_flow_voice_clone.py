"""x-vector cloning on a flow-matching family through a real tritonserver: CosyVoice 3's CAMPPlus encoder lane
turns the reference into a 192-d speaker embedding that conditions the codec (the LM's tokens do not depend on
the voice). The same reference and seed give the same audio, another reference other audio, and what is
refused is refused by name."""
from __future__ import annotations

import numpy as np
import pytest

from clients.stream import StreamError, synthesize
from tests.reference_audio import voiced

PRESET = "cosyvoice3-tiny"
TEXT = "Get the trust fund to the bank early."
RATE = 16000  # CAMPPlus's own rate
LOW, HIGH = voiced(2.0, RATE, f0=110.0), voiced(2.0, RATE, f0=220.0)


pytestmark = pytest.mark.parametrize("family", [PRESET], indirect=True)  # the family contract's server of it


@pytest.fixture
def url(family) -> str:
    return family.url


def clone(url: str, reference: np.ndarray, seed: int = 3, **inputs):
    return synthesize(url, TEXT, seed=seed, max_audio_seconds=1.2, ignore_eos=True, ref_audio=reference,
                      ref_sample_rate=RATE, x_vector_only=True, **inputs)


def test_a_reference_conditions_the_codec_reproducibly(url):
    first, again, other = clone(url, LOW), clone(url, LOW), clone(url, HIGH)
    preset = synthesize(url, TEXT, seed=3, max_audio_seconds=1.2, ignore_eos=True)
    assert first.audio.size == 30 * 960 and [c.index for c in first.chunks] == list(range(len(first.chunks)))
    np.testing.assert_array_equal(first.audio, again.audio)
    assert not np.allclose(first.audio, other.audio, atol=1e-4)  # another speaker embedding
    assert not np.allclose(first.audio, preset.audio, atol=1e-4)  # the preset voice's embedding


def test_in_context_cloning_is_refused_by_name(url):
    with pytest.raises(StreamError, match="(?i)in.context|ref_codes|transcript|ref_text"):
        synthesize(url, TEXT, seed=3, max_audio_seconds=0.8, ignore_eos=True, ref_audio=LOW, ref_sample_rate=RATE,
                   ref_text="A reference sentence.")
