"""TontaubeV1's voice encoder (models/tontaube/voice_encoder.py): reference audio -> `ref_codes` [frames, 4] as the
reference encodes a voice prompt (w2v-BERT features and DualCodec's encoder, golden in
test_tontaube_dualcodec_encoder.py); the transcript and `x_vector_only` change nothing; a clip too short for a
frame is refused by name."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from backend_python.models.tontaube.config import ACOUSTIC_CODES, SEMANTIC_CODES
from backend_python.models.tontaube.dualcodec_encoder import (DualCodecEncoder, SemanticFeatures, semantic_frames,
                                                              tiny_encoder_config)
from backend_python.models.tontaube.voice_encoder import REF_CODES, TontaubeVoiceEncoder


@pytest.fixture(scope="module")
def encoder() -> TontaubeVoiceEncoder:
    config = replace(tiny_encoder_config(), semantic_codebook_size=SEMANTIC_CODES, codebook_size=ACOUSTIC_CODES)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        dualcodec = DualCodecEncoder(config)
    return TontaubeVoiceEncoder(SemanticFeatures.tiny(layers=1, output_layer=1), dualcodec)


def clip(seconds: float, seed: int) -> torch.Tensor:
    return torch.from_numpy((np.random.default_rng(seed).uniform(-1, 1, int(seconds * 24000)) * 0.3)
                            .astype(np.float32))


def test_a_reference_becomes_its_frames_codes(encoder):
    audio = [clip(2.0, 1), clip(1.3, 2)]
    results = encoder.encode(audio, [False, True])
    for a, result in zip(audio, results):
        codes = result[REF_CODES]
        assert set(result) == {REF_CODES} and codes.shape == (semantic_frames(a.numel()), 4)
        assert codes[:, 0].max() < SEMANTIC_CODES and codes[:, 1:].max() < ACOUSTIC_CODES and codes.min() >= 0
        semantic, acoustic = encoder.encoder.encode(a[None], encoder.features(a[None]))
        assert torch.equal(codes, torch.cat((semantic[0, :, None], acoustic[0].T), dim=1))
    again = encoder.encode([audio[0]], [True])[0][REF_CODES]  # x_vector_only changes nothing
    assert torch.equal(again, results[0][REF_CODES])
    assert not torch.equal(encoder.encode([clip(2.0, 3)], [False])[0][REF_CODES], results[0][REF_CODES])


def test_a_clip_too_short_for_one_frame_is_refused(encoder):
    with pytest.raises(ValueError, match="at least one frame"):
        encoder.encode([torch.zeros(1000)], [False])
    with pytest.raises(ValueError, match="mono"):
        encoder.encode([torch.zeros(2, 48000)], [False])
