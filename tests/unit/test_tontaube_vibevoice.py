"""TontaubeV1's VibeVoice acoustic resynthesis (transformers' port, backend_python/models/tontaube/vibevoice.py)
against the reference's vendored `modular_vibevoice_tokenizer.py` on tiny random weights
(tests/fixtures/tontaube_vibevoice_golden.pt, made by tools/make_tontaube_vibevoice_fixture.py): the reference's
weights through our key mapping give its mean latents (a ragged waveform's last partial frame included), its
whole decode and its decode streamed in pieces, each to float32 rounding through its layers on any CPU
(tests/golden.py); and our own streamed decode equals our whole decode."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from backend_python.models.tontaube.vibevoice import (HOP_LENGTH, VIBEVOICE_1P5B_ACOUSTIC, AcousticResynth,
                                                      config_from_reference, from_reference_state, full_config,
                                                      reference_key, tiny_config)
from tests.golden import (BROKEN_LAYERS, assert_float32_close, assert_recorded_within_rounding, broken_layer,
                          is_float32_close, layers_run, num_layers)

FIXTURE = torch.load(Path(__file__).parents[1] / "fixtures" / "tontaube_vibevoice_golden.pt")
STATE = {k: v.float() for k, v in FIXTURE["state"].items()}  # float16-exact values, computed in float32
WAVEFORM = FIXTURE["waveform"].float()
STREAMED = {"rtol": 1e-5, "atol": 1e-4}  # pieces against whole: convolutions of other lengths round otherwise


@pytest.fixture(scope="module")
def resynth() -> AcousticResynth:
    return AcousticResynth.from_reference_state(FIXTURE["config"], STATE)


def encoder_layers(resynth: AcousticResynth) -> int:
    return num_layers(resynth.model.encoder)


def decoder_layers(resynth: AcousticResynth) -> int:
    return num_layers(resynth.model.decoder)


def stream(resynth: AcousticResynth, latents: torch.Tensor, pieces) -> torch.Tensor:
    """Decode `latents` in pieces of the given frame counts through one stream."""
    state, out, start = resynth.start_stream(), [], 0
    for n in pieces:
        out.append(resynth.decode_stream(state, latents[:, start:start + n]))
        start += n
    assert start == latents.shape[1] and state.frames == start
    return torch.cat(out, dim=-1)


def test_the_fixture_is_built_at_the_tiny_config():
    assert config_from_reference(FIXTURE["config"]).to_dict() == tiny_config().to_dict()


def test_the_full_config_is_vibevoice_1p5b_acoustic_tokenizer():
    config = full_config()
    assert (config.channels, config.hidden_size, config.num_filters, config.kernel_size) == (1, 64, 32, 7)
    assert list(config.downsampling_ratios) == [2, 2, 4, 5, 5, 8] and config.hop_length == HOP_LENGTH
    assert list(config.depths) == [3, 3, 3, 3, 3, 3, 8] and list(config.decoder_config.depths) == [8, 3, 3, 3, 3, 3, 3]
    assert (config.rms_norm_eps, config.layer_scale_init_value, config.vae_std) == (1e-5, 1e-6, 0.625)


def test_options_transformers_cannot_build_are_refused():
    for change in ({"conv_norm": "weight_norm"}, {"disable_last_norm": False}, {"decoder_depths": "3-3-3-3-3-3-3"},
                   {"decoder_n_filters": 16}, {"layernorm": "LN"}, {"causal": False}):
        with pytest.raises(ValueError, match=next(iter(change))):
            config_from_reference({**VIBEVOICE_1P5B_ACOUSTIC, **change})
    assert config_from_reference({**VIBEVOICE_1P5B_ACOUSTIC, "decoder_depths": "8-3-3-3-3-3-3"}).hidden_size == 64


def test_reference_names_map_onto_transformers_names():
    assert reference_key("encoder.downsample_layers.0.0.conv.conv.weight") == "encoder.stem.conv.conv.weight"
    assert reference_key("encoder.downsample_layers.6.0.conv.conv.bias") == "encoder.conv_layers.5.conv.conv.bias"
    assert (reference_key("decoder.upsample_layers.2.0.convtr.convtr.weight")
            == "decoder.conv_layers.1.convtr.convtr.weight")
    assert reference_key("decoder.stages.0.2.mixer.conv.conv.conv.weight") == "decoder.stem.stage.2.mixer.conv.weight"
    assert reference_key("encoder.stages.3.1.ffn.linear2.bias") == "encoder.conv_layers.2.stage.1.ffn.linear2.bias"
    assert reference_key("decoder.head.conv.conv.weight") == "decoder.head.conv.weight"
    with pytest.raises(KeyError):
        reference_key("encoder.norm.weight")
    whole = {"model.acoustic_tokenizer." + k: v for k, v in STATE.items()} | {"model.language_model.x": torch.ones(1)}
    assert from_reference_state(whole).keys() == from_reference_state(STATE).keys()


def test_the_mapped_reference_state_is_every_parameter(resynth):
    mapped = from_reference_state(STATE)
    assert mapped.keys() == resynth.model.state_dict().keys()
    for name, value in resynth.model.state_dict().items():
        assert torch.equal(value, mapped[name]), name


def test_encode_mean_matches_the_reference_latents(resynth):
    assert_float32_close(resynth.encode_mean(WAVEFORM), FIXTURE["latents"], encoder_layers(resynth))


def test_a_ragged_waveform_keeps_its_partial_last_frame_as_the_reference_pads_it(resynth):
    latents = resynth.encode_mean(WAVEFORM[:, :FIXTURE["ragged_samples"]])
    assert latents.shape == FIXTURE["ragged_latents"].shape == (2, 3, 8)
    assert_float32_close(latents, FIXTURE["ragged_latents"], encoder_layers(resynth))


def test_whole_decode_matches_the_reference(resynth):
    audio = resynth.decode(FIXTURE["latents"])
    assert audio.shape == (2, FIXTURE["latents"].shape[1] * HOP_LENGTH)
    assert_float32_close(audio, FIXTURE["decoded"], decoder_layers(resynth))


def test_the_reference_s_own_rounding_leaves_room_for_another_cpu_s():
    exact = AcousticResynth.from_reference_state(FIXTURE["config"], STATE)
    exact.model.double()
    assert {p.dtype for p in exact.model.parameters()} == {torch.float64}
    assert_recorded_within_rounding(FIXTURE["latents"], exact.encode_mean(WAVEFORM.double()), encoder_layers(exact))
    assert_recorded_within_rounding(FIXTURE["decoded"], exact.decode(FIXTURE["latents"].double()),
                                    decoder_layers(exact))


@pytest.mark.parametrize("which", BROKEN_LAYERS)
def test_a_broken_layer_fails_the_golden_comparisons(resynth, which):
    with broken_layer(layers_run(resynth.model.encoder, lambda: resynth.encode_mean(WAVEFORM)), which):
        latents = resynth.encode_mean(WAVEFORM)
    with broken_layer(layers_run(resynth.model.decoder, lambda: resynth.decode(FIXTURE["latents"])), which):
        audio = resynth.decode(FIXTURE["latents"])
        streamed = stream(resynth, FIXTURE["latents"], FIXTURE["pieces"])
    assert not is_float32_close(latents, FIXTURE["latents"], encoder_layers(resynth))
    assert not is_float32_close(audio, FIXTURE["decoded"], decoder_layers(resynth))
    assert not is_float32_close(streamed, FIXTURE["streamed"], decoder_layers(resynth))


def test_streamed_decode_matches_the_reference_streaming_cache(resynth):
    assert_float32_close(stream(resynth, FIXTURE["latents"], FIXTURE["pieces"]), FIXTURE["streamed"],
                         decoder_layers(resynth))


@pytest.mark.parametrize("pieces", [(1, 1, 1, 1), (3, 1), (2, 2), (1, 0, 3)])
def test_decoding_in_pieces_equals_decoding_whole(resynth, pieces):
    latents = resynth.encode_mean(WAVEFORM)
    torch.testing.assert_close(stream(resynth, latents, pieces), resynth.decode(latents), **STREAMED)


def test_streams_keep_their_own_state(resynth):
    latents = FIXTURE["latents"]
    a, b = resynth.start_stream(), resynth.start_stream()
    first = resynth.decode_stream(a, latents[:, :2])
    resynth.decode_stream(b, latents[:1, 2:] * 3.0)
    torch.testing.assert_close(torch.cat([first, resynth.decode_stream(a, latents[:, 2:])], -1),
                               FIXTURE["streamed"], **STREAMED)


@pytest.mark.parametrize("frames", [(1, 1, 1, 1), (3, 1), (2, 2)])
def test_a_waveform_resynthesised_in_pieces_equals_the_whole(frames):
    """`resynth_stream`: encoder and decoder tails carried from piece to piece (pieces of whole frames, the last one
    partial and padded as the whole waveform's end); the input tails are left as they were. The codec's random
    tokenizer (`AcousticResynth.random`: its biases keep the norms off zero, where the fixture's 1-channel norms
    turn rounding into 2e-4): measured 1.7e-6."""
    resynth = AcousticResynth.random(tiny_config(), seed=0)
    waveform = 0.2 * torch.randn(2, 4 * HOP_LENGTH - 1000, generator=torch.Generator().manual_seed(1))
    whole = resynth.decode(resynth.encode_mean(waveform))
    fresh = resynth.new_stream_tails()
    tails = {k: v.expand(waveform.shape[0], *v.shape[1:]).clone() for k, v in fresh.items()}
    pieces, start = [], 0
    for n in frames[:-1]:
        piece, tails = resynth.resynth_stream(tails, waveform[:, start:start + n * HOP_LENGTH])
        pieces.append(piece)
        start += n * HOP_LENGTH
    pieces.append(resynth.resynth_stream(tails, waveform[:, start:])[0])
    torch.testing.assert_close(torch.cat(pieces, dim=-1), whole, rtol=0, atol=1e-5)
    assert all(t.abs().max() == 0 for t in fresh.values()) and len(fresh) == len(tails)


def test_latents_must_be_batch_frames_dim_and_a_stream_keeps_its_batch(resynth):
    state = resynth.start_stream()
    with pytest.raises(ValueError, match="latents must be"):
        resynth.decode_stream(state, FIXTURE["latents"].transpose(1, 2))
    resynth.decode_stream(state, FIXTURE["latents"][:, :1])
    with pytest.raises(ValueError, match="batch of 2"):
        resynth.decode_stream(state, FIXTURE["latents"][:1, 1:2])


def test_the_extracted_acoustic_tokenizer_folder_loads(tmp_path, resynth):
    from safetensors.torch import save_file

    (tmp_path / "config.json").write_text(json.dumps(FIXTURE["config"]), encoding="utf-8")
    save_file({k: v.contiguous() for k, v in STATE.items()}, str(tmp_path / "model.safetensors"))
    loaded = AcousticResynth.from_reference_dir(tmp_path)
    assert_float32_close(loaded.encode_mean(WAVEFORM), FIXTURE["latents"], encoder_layers(loaded))


def test_a_piece_of_exactly_latent_dim_frames_is_read_frames_first(resynth):
    """The reference's `decode` leaves [B, n, dim] unpermuted when n == dim (VibeVoice: 64 frames) and decodes
    it transposed; here 8 frames of the tiny's 8-d latents decode as frames, their first 4 as those 4 alone."""
    latents = torch.cat([FIXTURE["latents"], FIXTURE["latents"].flip(1)], dim=1)
    assert latents.shape[1] == resynth.latent_dim
    head = FIXTURE["decoded"]
    torch.testing.assert_close(resynth.decode(latents)[:, :head.shape[1]], head, **STREAMED)
    streamed = resynth.decode_stream(resynth.start_stream(), latents)
    torch.testing.assert_close(streamed[:, :head.shape[1]], head, **STREAMED)
