"""Qwen3-TTS codec decoder: golden vs the reference package, windowed and batched decode."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

from backend_python.models.qwen3_tts.codec import Qwen3TTSCodec, build_tiny_codec_checkpoint
from backend_python.models.qwen3_tts.codec_config import Qwen3TTSCodecConfig, full_codec_config, tiny_codec_config
from tests.golden import assert_float32_close, num_layers

torch.set_flush_denormal(True)

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "qwen3_tts_tiny")
CHECKPOINT = os.path.join(FIXTURES, "speech_tokenizer")
GOLDEN = os.path.join(FIXTURES, "codec_golden.npz")

EXACT_ATOL = 1e-5  # windows whose context covers the receptive field: measured ~2e-6
# Context 25 (the reference's chunked_decode) is an approximation: a frame sees
# num_hidden_layers * (sliding_window - 1) = 142 frames back in the tiny decoder.
# Measured max errors on 160 frames: 3.4e-2 (25), 1.8e-2 (50), 3.8e-3 (72), 2e-6 (143).
CONTEXT_ATOL = {25: 0.1, 50: 0.05, 72: 0.01, 143: EXACT_ATOL}
BATCH_ATOL = 5e-6  # batched vs alone: same math, other GEMM shapes; measured 1.0e-6


@pytest.fixture(scope="module")
def codec() -> Qwen3TTSCodec:
    return Qwen3TTSCodec.from_pretrained(CHECKPOINT)


@pytest.fixture(scope="module")
def golden() -> dict[str, torch.Tensor]:
    with np.load(GOLDEN) as data:
        return {k: torch.from_numpy(data[k]) for k in data.files}


def random_codes(num_frames: int, seed: int, codebook_size: int = 64, num_codebooks: int = 16) -> torch.Tensor:
    """[1, T, K] int64 codes; K = 16, the fixture codec's (the tiny preset's: `tiny_codes`)."""
    return torch.randint(0, codebook_size, (1, num_frames, num_codebooks), generator=torch.Generator().manual_seed(seed))


def tiny_codes(num_frames: int, seed: int) -> torch.Tensor:
    return random_codes(num_frames, seed, num_codebooks=tiny_codec_config().num_quantizers)


def chunk_bounds(num_frames: int, first: int = 2, rest: int = 10) -> list[tuple[int, int]]:
    bounds, start, size = [], 0, first
    while start < num_frames:
        bounds.append((start, min(start + size, num_frames)))
        start, size = bounds[-1][1], rest
    return bounds


def windowed_decode(codec: Qwen3TTSCodec, codes: torch.Tensor, context: int) -> torch.Tensor:
    """Decode [1, T, K] chunk by chunk, each with up to `context` frames before it; -> [T * spf]."""
    pieces = []
    for start, end in chunk_bounds(codes.shape[1]):
        used = min(context, start)
        pieces += codec.decode_windows([(codes[0, start - used: end], used)])
    return torch.cat(pieces)


# ------------------------------------------------------------------ golden


def test_golden_full_decode_matches_reference(codec, golden):
    # 100 frames: the tail frames attend over a full sliding window (72)
    audio = codec.decode(golden["codes"])
    assert audio.dtype == torch.float32 and audio.shape == (1, 100 * 1920)
    assert_float32_close(audio[:, :19200], golden["audio_head"], num_layers(codec.decoder))
    assert_float32_close(audio[:, -19200:], golden["audio_tail"], num_layers(codec.decoder))


def test_golden_cut_context_window_matches_reference_chunked_decode(codec, golden):
    # The reference's chunked_decode(chunk_size=10, left_context_size=25) decoded frames 90..99
    # from the window 65..99; our window must reproduce it, truncation error included.
    window = golden["codes"][0, 65:100]
    (audio,) = codec.decode_windows([(window, 25)])
    assert_float32_close(audio, golden["last_chunk"][0], num_layers(codec.decoder))


def test_tiny_builder_writes_the_fixture_decoder(codec, tmp_path):
    built = build_tiny_codec_checkpoint(tmp_path, seed=0, cfg=codec.cfg)  # the fixture's shape, not the preset's
    assert (tmp_path / "config.json").is_file() and (tmp_path / "model.safetensors").is_file()
    for name, tensor in codec.state_dict().items():  # seed 0's draw, as exact as the random init rounds here
        assert_float32_close(built.state_dict()[name], tensor, depth=1, msg=name)


# ------------------------------------------------------------------ windows


def test_decoder_is_strictly_causal(codec):
    codes = random_codes(20, seed=1)
    changed = codes.clone()
    changed[0, 12:] = (changed[0, 12:] + 1) % 64
    before, after = codec.decode(codes)[0], codec.decode(changed)[0]
    spf = codec.samples_per_frame
    torch.testing.assert_close(after[: 12 * spf], before[: 12 * spf], atol=1e-6, rtol=0)
    assert (after[12 * spf:] - before[12 * spf:]).abs().max() > 1e-2


@pytest.mark.parametrize("context", sorted(CONTEXT_ATOL))
def test_windowed_decode_matches_full_decode(codec, context):
    codes = random_codes(context + 32, seed=7)  # the last chunks have their context cut
    full = codec.decode(codes)[0]
    windowed = windowed_decode(codec, codes, context)
    torch.testing.assert_close(windowed, full, atol=CONTEXT_ATOL[context], rtol=0)


def test_batched_windows_of_different_lengths_equal_single_windows(codec):
    codes = random_codes(60, seed=3)[0]
    windows = [(codes[:2], 0), (codes[5:40], 25), (codes[20:32], 10), (codes[:60], 50)]
    batched = codec.decode_windows(windows)
    for (window, context), audio in zip(windows, batched):
        (alone,) = codec.decode_windows([(window, context)])
        assert audio.shape == ((window.shape[0] - context) * codec.samples_per_frame,)
        torch.testing.assert_close(audio, alone, atol=BATCH_ATOL, rtol=0)


# ------------------------------------------------------------------ contract and I/O


def test_output_contract(codec):
    audio = codec.decode(random_codes(7, seed=4).repeat(2, 1, 1))
    assert audio.shape == (2, 7 * 1920) and audio.dtype == torch.float32
    assert audio.abs().max() <= 1.0 and audio.std() > 1e-2
    assert (codec.num_codebooks, codec.sample_rate, codec.samples_per_frame) == (16, 24000, 1920)
    assert codec.left_context_frames == 25


def test_bf16_weights_still_return_float32(codec, tmp_path):
    codec.save_pretrained(tmp_path)
    half = Qwen3TTSCodec.from_pretrained(tmp_path, dtype=torch.bfloat16)
    codes = random_codes(5, seed=5)
    audio = half.decode(codes)
    assert audio.dtype == torch.float32
    assert (audio - codec.decode(codes)).abs().mean() < 0.05


def test_save_load_round_trip(tmp_path):
    codec = Qwen3TTSCodec.from_config(tiny_codec_config(), seed=3)
    codec.save_pretrained(tmp_path)
    loaded = Qwen3TTSCodec.from_pretrained(tmp_path, left_context_frames=50)
    assert loaded.cfg == Qwen3TTSCodecConfig(**{**codec.cfg.__dict__, "left_context_frames": 50})
    codes = tiny_codes(6, seed=6)
    assert torch.equal(loaded.decode(codes), codec.decode(codes))
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "qwen3_tts_tokenizer_12hz" and config["decoder_config"]["codebook_dim"] == 16


def test_loading_is_strict_on_decoder_keys(tmp_path):
    codec = Qwen3TTSCodec.from_config(tiny_codec_config(), seed=0)
    codec.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["decoder_config"]["num_hidden_layers"] = 3  # the file has only 2 layers
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(RuntimeError, match="Missing key"):
        Qwen3TTSCodec.from_pretrained(tmp_path)


def test_seed_changes_weights_and_codes_matter():
    a = Qwen3TTSCodec.from_config(tiny_codec_config(), seed=0)
    b = Qwen3TTSCodec.from_config(tiny_codec_config(), seed=1)
    codes = tiny_codes(4, seed=0)
    assert not torch.equal(a.decode(codes), b.decode(codes))
    assert not torch.allclose(a.decode(codes), a.decode((codes + 1) % 64), atol=1e-3)


def test_full_config_has_the_released_shape():
    with torch.device("meta"):
        full = Qwen3TTSCodec(full_codec_config())
    num_params = sum(p.numel() for p in full.parameters())
    assert 113e6 < num_params < 116e6
    assert full.decoder.quantizer.rvq_rest.vq.layers[14]._codebook.embedding_sum.shape == (2048, 256)
    assert full.samples_per_frame == 1920


def test_config_rejects_bad_values():
    with pytest.raises(ValueError):
        Qwen3TTSCodecConfig(codebook_dim=16, hidden_act="gelu")
    with pytest.raises(ValueError):
        Qwen3TTSCodecConfig(codebook_dim=16, left_context_frames=-1)
    with pytest.raises(ValueError):
        Qwen3TTSCodec.from_config(tiny_codec_config()).decode(torch.zeros(1, 3, 8, dtype=torch.long))


def test_a_group_of_codebooks_is_one_lookup_equal_to_each_codebook_summed(codec):
    """The quantizer's table (every codebook's entries, ratios of its parameters) against each codebook's own
    entries summed in order; and new weights loaded into the codebooks reach the next decode."""
    quantizer = codec.decoder.quantizer.rvq_rest
    codes = random_codes(7, seed=3, num_codebooks=len(quantizer.vq.layers))  # [1, T, K_group]

    def summed_one_by_one() -> torch.Tensor:
        entries = [layer._codebook.decode(codes[..., k]) for k, layer in enumerate(quantizer.vq.layers)]
        return quantizer.output_proj(torch.stack(entries).sum(0).transpose(1, 2))

    with torch.no_grad():
        torch.testing.assert_close(quantizer.decode(codes), summed_one_by_one(), atol=1e-6, rtol=1e-6)
        book = quantizer.vq.layers[2]._codebook
        saved = {k: v.clone() for k, v in quantizer.state_dict().items()}
        try:
            before = quantizer.decode(codes)
            state = dict(saved)
            state["vq.layers.2._codebook.embedding_sum"] = book.embedding_sum * 3.0 + 1.0
            quantizer.load_state_dict(state)  # copies into the parameters: their versions move on
            after = quantizer.decode(codes)
            assert (after - before).abs().max() > 1e-3  # the new entries are used, not a stale table
            torch.testing.assert_close(after, summed_one_by_one(), atol=1e-6, rtol=1e-6)
        finally:
            quantizer.load_state_dict(saved)
        torch.testing.assert_close(quantizer.decode(codes), before, atol=0, rtol=0)
