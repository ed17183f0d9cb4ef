"""SNAC codec: golden vs the `snac` package, its two-sided receptive field, and windowed vs full decode.

SNAC's decoder is not causal, so a chunk decoded with left context only is exact except for its
last ~2.3 frames, which miss the frames after them. Measured on random weights (44 frames, chunks
2, 4, 8, 10, …, 3 frames of left context): away from chunk ends max error 4e-7; within the last 3
frames of a chunk, tiny codec max 0.365 / rms 6.2e-3 (its output: DC ~0.93, std 0.019), full-size
codec max 0.15-0.18 / rms 8.5e-3 (output std 0.11).
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from snac import SNAC

from backend_python.models.orpheus.codec import SnacCodec, build_codec_checkpoint, read_weights
from backend_python.models.orpheus.frames import CODES_PER_SLOT, FRAME_TOKENS, frames_to_levels
from backend_python.models.orpheus.presets import full_snac, tiny_snac

SPF = 2048
EXACT_ATOL = 1e-5  # measured <= 4e-7 (fp32, CPU; folded weight norm rounds differently from the package)
EDGE_ATOL = {"tiny": 0.5, "full": 0.25}  # the last 3 frames of a chunk: measured max 0.365 and 0.176
EDGE_RMS = {"tiny": 0.01, "full": 0.012}  # measured 6.2e-3 and 8.5e-3
CHUNK_PLAN = (2, 4, 8, 10)  # the engine's default chunk sizes (then 10, 10, …)
CONTEXT = 3


def random_codes(num_frames: int, seed: int, batch: int = 1) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, CODES_PER_SLOT, (batch, num_frames, FRAME_TOKENS), generator=generator)


def chunk_bounds(num_frames: int) -> list[tuple[int, int]]:
    bounds, start = [], 0
    while start < num_frames:
        size = CHUNK_PLAN[min(len(bounds), len(CHUNK_PLAN) - 1)]
        bounds.append((start, min(start + size, num_frames)))
        start = bounds[-1][1]
    return bounds


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("snac-tiny")
    build_codec_checkpoint(tiny_snac(), path, seed=0)
    return path


@pytest.fixture(scope="module")
def codecs(tiny_dir) -> dict[str, SnacCodec]:
    return {"tiny": SnacCodec.from_pretrained(tiny_dir), "full": SnacCodec.from_config(full_snac(), seed=0)}


def test_decode_matches_the_snac_package_without_noise(tiny_dir, codecs):
    package = SNAC(**tiny_snac().snac_kwargs()).eval()
    package.load_state_dict(read_weights(tiny_dir))
    for module in package.modules():
        if type(module).__name__ == "NoiseBlock":
            module.forward = lambda x: x
    codes = random_codes(6, seed=0, batch=2)
    with torch.inference_mode():
        expected = package.decode(frames_to_levels(codes))[:, 0]
    got = codecs["tiny"].decode(codes)
    assert got.shape == (2, 6 * SPF) and expected.std() > 1e-3
    torch.testing.assert_close(got, expected, rtol=0, atol=EXACT_ATOL)


def test_same_codes_same_audio(codecs):
    codes = random_codes(4, seed=1)
    assert torch.equal(codecs["tiny"].decode(codes), codecs["tiny"].decode(codes))


def test_the_decoder_sees_about_two_frames_to_each_side(codecs):
    """Changing frame 8 of 16 changes samples from ~2.3 frames before it to ~2.3 frames after it."""
    codes = random_codes(16, seed=2)
    changed = codes.clone()
    changed[0, 8] = (changed[0, 8] + 1) % CODES_PER_SLOT
    diff = (codecs["full"].decode(codes) - codecs["full"].decode(changed))[0].abs() > 0
    first, last = diff.nonzero()[[0, -1], 0].tolist()
    assert (8 - CONTEXT) * SPF <= first < 8 * SPF - SPF  # reaches back more than a frame: not causal
    assert 9 * SPF + SPF < last < (9 + CONTEXT) * SPF  # and forward more than a frame, less than 3


@pytest.mark.parametrize("size", ["tiny", "full"])
def test_windows_with_three_frames_each_side_are_exact(codecs, size):
    codes = random_codes(20, seed=3)
    full = codecs[size].decode(codes)[0]
    window = codecs[size].decode_windows([(codes[0, 5 - CONTEXT:12 + CONTEXT], CONTEXT)])[0]
    torch.testing.assert_close(window[: 7 * SPF], full[5 * SPF:12 * SPF], rtol=0, atol=EXACT_ATOL)


@pytest.mark.parametrize("size", ["tiny", "full"])
def test_chunked_decode_is_exact_but_for_each_chunks_last_frames(codecs, size):
    codes, codec = random_codes(44, seed=4), codecs[size]
    full = codec.decode(codes)[0]
    bounds = chunk_bounds(44)
    windows = [(codes[0, max(0, s - CONTEXT):e], s - max(0, s - CONTEXT)) for s, e in bounds]
    error = (torch.cat(codec.decode_windows(windows)) - full).abs()
    edge = torch.zeros_like(error, dtype=torch.bool)
    for _, end in bounds[:-1]:  # the last chunk ends where the utterance does: nothing is missing there
        edge[max(0, end - CONTEXT) * SPF:end * SPF] = True
    assert error[~edge].max() <= EXACT_ATOL
    assert 0 < error[edge].max() <= EDGE_ATOL[size]
    assert error[edge].pow(2).mean().sqrt() <= EDGE_RMS[size]


# a chunked decode whose windows hold `lookahead` frames after each chunk, against the full decode: measured
# max error tiny 8.4e-6 (output std 0.019) / full 1.8e-4 (std 0.11) with 2 frames (the serving default),
# <= 5e-7 with 3
LOOKAHEAD_ATOL = {("tiny", 2): 5e-5, ("full", 2): 1e-3, ("tiny", 3): EXACT_ATOL, ("full", 3): EXACT_ATOL}


@pytest.mark.parametrize("size,lookahead", sorted(LOOKAHEAD_ATOL))
def test_chunks_with_lookahead_match_the_full_decode(codecs, size, lookahead):
    codes, codec = random_codes(44, seed=4), codecs[size]
    full = codec.decode(codes)[0]
    windows, kept = [], []
    for s, e in chunk_bounds(44):
        start, end = max(0, s - CONTEXT), min(44, e + lookahead)
        windows.append((codes[0, start:end], s - start))
        kept.append((e - s) * SPF)
    audio = torch.cat([a[:n] for a, n in zip(codec.decode_windows(windows), kept)])
    assert audio.shape == full.shape
    torch.testing.assert_close(audio, full, rtol=0, atol=LOOKAHEAD_ATOL[(size, lookahead)])


def test_windows_of_mixed_lengths_decode_as_if_alone(codecs):
    codec = codecs["tiny"]
    windows = [(random_codes(n, seed=n)[0], c) for n, c in ((5, 3), (2, 0), (5, 0), (9, 3))]
    batched = codec.decode_windows(windows)
    for (codes, context), audio in zip(windows, batched):
        alone = codec.decode(codes[None])[0, context * SPF:]
        assert audio.shape == ((codes.shape[0] - context) * SPF,)
        torch.testing.assert_close(audio, alone, rtol=0, atol=EXACT_ATOL)


def test_shapes_and_facts(codecs):
    codec = codecs["tiny"]
    assert (codec.num_codebooks, codec.codebook_size, codec.sample_rate, codec.samples_per_frame,
            codec.left_context_frames, codec.lookahead_frames, codec.overlap_frames) == (7, 4096, 24000, 2048,
                                                                                         CONTEXT, 2, 0)
    assert codec.decode(random_codes(3, seed=5)).abs().max() <= 1.0
    with pytest.raises(ValueError, match="7"):
        codec.decode(torch.zeros(1, 3, 16, dtype=torch.long))
