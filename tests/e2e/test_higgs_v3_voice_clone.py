"""In-context cloning on Higgs Audio v3 through a real tritonserver: the voice-encoder lane codes the reference with
the audio tokenizer's encoder, the LM hears the transcript and the codes as an earlier turn; the same reference and
seed give the same audio, another reference other audio, and what Higgs cannot use is refused by name."""
from __future__ import annotations

import numpy as np
import pytest

from clients.stream import StreamError, synthesize
from tests.e2e.test_streaming import PATH_ROUNDING
from tests.reference_audio import voiced

PRESET = "higgs-v3-tiny"
TEXT = "Get the trust fund to the bank early."
RATE = 16000  # the server resamples it to the tokenizer's 24 kHz
LOW, HIGH = voiced(2.0, RATE, f0=110.0), voiced(2.0, RATE, f0=240.0)
REF_TEXT = "A reference sentence, read aloud."


pytestmark = pytest.mark.parametrize("family", [PRESET], indirect=True)  # the family contract's server of it


@pytest.fixture
def url(family) -> str:
    return family.url


def clone(url: str, reference: np.ndarray, seed: int = 3, **inputs):
    return synthesize(url, TEXT, seed=seed, max_audio_seconds=1.2, ignore_eos=True, ref_audio=reference,
                      ref_sample_rate=RATE, **inputs)


def same_audio(first, second) -> None:
    if [c.lane for c in first.chunks] == [c.lane for c in second.chunks]:
        np.testing.assert_array_equal(first.audio, second.audio)
    else:  # routed differently (by timing): the same frames, decoded by the two paths
        np.testing.assert_allclose(first.audio, second.audio, rtol=0, atol=PATH_ROUNDING)


def test_a_cloned_voice_streams_reproducibly_and_the_reference_is_heard(url):
    first, again = clone(url, LOW, ref_text=REF_TEXT), clone(url, LOW, ref_text=REF_TEXT)
    other = clone(url, HIGH, ref_text=REF_TEXT)
    plain = synthesize(url, TEXT, seed=3, max_audio_seconds=1.2, ignore_eos=True)
    assert first.audio.size == 30 * 960 and [c.index for c in first.chunks] == list(range(len(first.chunks)))
    same_audio(first, again)
    assert not np.allclose(first.audio, other.audio, atol=1e-3)  # other codes in the prompt
    assert not np.allclose(first.audio, plain.audio, atol=1e-3)  # a voice prompt at all


def test_what_higgs_cannot_clone_from_is_refused_by_name(url):
    with pytest.raises(StreamError, match="transcript|ref_text"):
        clone(url, LOW)
    with pytest.raises(StreamError, match="x_vector_only"):
        clone(url, LOW, x_vector_only=True)
    assert clone(url, LOW, ref_text=REF_TEXT).chunks  # the server serves on
