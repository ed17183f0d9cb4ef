"""Zonos's speaker model against the reference: the network (ResNet293 SimAM blocks, attentive statistics pooling,
bottleneck, LDA) against Zyphra's `ResNet293_based` on tiny random weights (tests/fixtures/zonos_speaker_golden.pt,
tools/make_zonos_fixture.py), and the log-mel front end, which the reference takes from torchaudio, against
transformers' own spectrogram and HTK mel filters (torchaudio's settings: no filter norm, centred reflect-padded
frames, a periodic Hann window of 400 in an FFT of 512)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from backend_python.models.zonos.speaker import SpeakerConfig, SpeakerEmbedding, log_fbank
from backend_python.models.zonos.voice_encoder import ZonosVoiceEncoder
from tests.golden import assert_float32_close, num_layers
from tools.make_zonos_fixture import draw_speaker_weights, speaker_audio

FIXTURE = Path(__file__).parents[1] / "fixtures" / "zonos_speaker_golden.pt"
MEL_LAYERS = 2  # the front end: the FFT's sums and the mel filterbank's


@pytest.fixture(scope="module")
def golden() -> dict:
    return torch.load(FIXTURE, weights_only=False)


def test_the_speaker_vector_matches_the_reference_network(golden):
    with torch.device("meta"):
        model = SpeakerEmbedding(SpeakerConfig(in_planes=golden["in_planes"]))  # ResNet293's blocks
    model.load_state_dict(draw_speaker_weights(golden["shapes"], golden["seed"]), strict=True, assign=True)
    model.eval()
    with torch.no_grad():
        embedding = model.bottleneck(model.pooling(model.front(log_fbank(speaker_audio())[None, None])))[0]
        speaker = model(speaker_audio())
    # ResNet293 and its LDA: float32 rounding through every layer (the log-mel's own differences: the test below)
    assert_float32_close(embedding, golden["embedding"], num_layers(model) + MEL_LAYERS)
    assert_float32_close(speaker, golden["speaker"], num_layers(model) + MEL_LAYERS)
    encoded = ZonosVoiceEncoder(model).encode([speaker_audio()], [False])[0]["speaker_embedding"]
    assert torch.equal(encoded, speaker) and encoded.shape == (128,)


def test_the_log_mel_is_torchaudios(golden):
    from transformers.audio_utils import mel_filter_bank, spectrogram, window_function

    audio = speaker_audio()
    filters = mel_filter_bank(num_frequency_bins=257, num_mel_filters=80, min_frequency=0.0, max_frequency=8000.0,
                              sampling_rate=16000, norm=None, mel_scale="htk")
    mel = spectrogram(audio.numpy().astype(np.float64), window_function(400, "hann"), frame_length=400,
                      hop_length=160, fft_length=512, power=2.0, center=True, pad_mode="reflect",
                      mel_filters=filters)  # [80, T]
    log = np.log(mel + 1e-6)
    expected = torch.from_numpy(log - log.mean(axis=1, keepdims=True)).float()
    ours = log_fbank(audio)
    assert ours.shape == expected.shape == (80, 101)
    torch.testing.assert_close(ours, expected, rtol=0, atol=2e-4)  # 4.3e-5 observed (log domain)


def test_short_or_stereo_audio_is_refused_by_name(golden):
    with torch.device("meta"):
        model = SpeakerEmbedding(SpeakerConfig(in_planes=2, num_blocks=(1, 1, 1, 1)))
    encoder = ZonosVoiceEncoder(model.to_empty(device="cpu"))
    for audio in (torch.zeros(300), torch.zeros(2, 16000)):
        with pytest.raises(ValueError, match="mono \\[N\\] with N > 512 samples at 16000 Hz"):
            encoder.encode([audio], [False])


def test_a_random_speaker_model_tells_voices_apart():
    """The presets' random speaker model must give each reference its own vector, or cloning tests prove nothing."""
    from backend_python.models.zonos.presets import preset_config
    from backend_python.models.zonos.speaker import random_speaker_model

    model = random_speaker_model(preset_config("zonos-tiny").speaker, seed=0)
    t = torch.arange(32_000) / 16_000
    low, high = (torch.sin(2 * torch.pi * f0 * t) * 0.3 for f0 in (140.0, 260.0))
    with torch.no_grad():
        a, b = model(low), model(high)
    assert torch.nn.functional.cosine_similarity(a, b, dim=0) < 0.95
