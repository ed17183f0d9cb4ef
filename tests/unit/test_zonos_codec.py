"""DAC 44.1 kHz as Zonos's codec: 9 codebooks of 1024, 512 samples a frame (86.13 frames/s), its receptive field,
and windowed decoding against a full decode at the family's left context and lookahead (tolerance pinned)."""
from __future__ import annotations

import pytest
import torch

from backend_python.models.zonos.codec import LEFT_CONTEXT_FRAMES, LOOKAHEAD_FRAMES, DacCodec
from backend_python.models.zonos.lm import ZonosLM
from backend_python.models.zonos.presets import full_dac, tiny_dac

NUM_FRAMES = 48


@pytest.fixture(scope="module")
def codec() -> DacCodec:
    torch.set_flush_denormal(True)
    return DacCodec.from_config(tiny_dac(), seed=0)


@pytest.fixture(scope="module")
def codes() -> torch.Tensor:
    return torch.randint(0, 1024, (1, NUM_FRAMES, 9), generator=torch.Generator().manual_seed(3))


def test_the_shape_and_rate_are_dac_44khz_and_the_lms(codec, codes):
    audio = codec.decode(codes)
    assert audio.shape == (1, NUM_FRAMES * 512) and audio.dtype == torch.float32
    assert (codec.num_codebooks, codec.codebook_size, codec.sample_rate, codec.samples_per_frame) == (9, 1024, 44100,
                                                                                                    512)
    assert codec.shape.frame_rate == pytest.approx(86.1328125)
    assert 0.03 < audio.std() < 0.3 and audio.abs().max() <= 1.0  # the random codec is calibrated to ~0.1
    assert ZonosLM.frame_rate.fget(None) == codec.shape.frame_rate


def test_the_full_config_is_descripts_dac_44khz():
    from backend_python.models.zonos.codec import dac_config

    config = dac_config(full_dac())
    assert (config.n_codebooks, config.codebook_size, config.hop_length, config.sampling_rate,
            config.decoder_hidden_size, config.hidden_size) == (9, 1024, 512, 44100, 1536, 1024)


def test_one_frame_reaches_about_ten_frames_either_side(codec, codes):
    """The decoder is centred, not causal: why a chunk needs lookahead (codec.py)."""
    other = codes.clone()
    other[0, 24] = (other[0, 24] + 1) % 1024
    full = codec.decode(codes)
    change = (codec.decode(other) - full)[0].abs()
    reached = (change > 1e-7 * full.std()).nonzero()[:, 0] / 512
    assert 9 < 24 - reached.min() <= LEFT_CONTEXT_FRAMES and 10 < reached.max() - 24 <= LOOKAHEAD_FRAMES + 1
    assert change.max() > 0.1 * full.std()  # a code matters: random weights that do not fade the codes out


def test_different_codes_decode_to_different_audio(codec, codes):
    other = torch.randint(0, 1024, codes.shape, generator=torch.Generator().manual_seed(4))
    a, b = codec.decode(codes), codec.decode(other)
    assert (a - b).std() > 0.5 * a.std() and a.mean().abs() < 0.5 * a.std()


def test_windows_with_context_and_lookahead_match_a_full_decode(codec, codes):
    full = codec.decode(codes)[0]
    windows, spans = [], []
    for start, end in ((0, 8), (8, 24), (24, 40), (40, NUM_FRAMES)):  # the last window is the stream's end
        left = min(start, LEFT_CONTEXT_FRAMES)
        right = min(NUM_FRAMES, end + LOOKAHEAD_FRAMES)
        windows.append((codes[0, start - left:right], left))
        spans.append((start, end))
    for (start, end), audio in zip(spans, codec.decode_windows(windows)):
        new = audio[: (end - start) * 512]
        error = (new - full[start * 512:end * 512]).abs().max() / full.std()
        assert error < 2e-4, (start, end, float(error))  # ~3e-5 observed; 0.3 with 8 frames of lookahead


def test_without_lookahead_a_window_misses_its_right_context(codec, codes):
    full = codec.decode(codes)[0]
    (audio,) = codec.decode_windows([(codes[0, 4:24], LEFT_CONTEXT_FRAMES)])
    assert (audio - full[14 * 512:24 * 512]).abs().max() / full.std() > 0.1
