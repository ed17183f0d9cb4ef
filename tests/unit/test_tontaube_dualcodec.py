"""TontaubeV1's DualCodec decoder against DualCodec's own code (tests/fixtures/tontaube_dualcodec_golden.pt, made by
tools/make_tontaube_fixture.py): the tiny model's audio from the reference's random weights, the decode side's
names, and the official 12hz_v1's decode-side shapes, size and output length (the reference built on the meta
device)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from backend_python.models.tontaube.dualcodec import (DualCodecConfig, DualCodecDecoder, decoder_state, full_config,
                                                      output_length, tiny_config)
from tests.golden import (BROKEN_LAYERS, assert_float32_close, assert_recorded_within_rounding, broken_layer,
                          is_float32_close, layers_run, num_layers)

FIXTURE = torch.load(Path(__file__).parents[1] / "fixtures" / "tontaube_dualcodec_golden.pt")
FULL = FIXTURE["full"]


def tiny_decoder() -> DualCodecDecoder:
    """Our decoder at the fixture's shape with the reference's weights (stored at half precision, exactly)."""
    model = DualCodecDecoder(DualCodecConfig(**FIXTURE["config"])).eval()
    model.load_state_dict({k: v.float() for k, v in FIXTURE["state"].items()}, strict=True)
    return model


def test_tiny_config_is_the_fixture_s():
    assert DualCodecConfig(**FIXTURE["config"]) == tiny_config()


def test_the_audio_is_the_reference_s():
    model = tiny_decoder()
    audio = model.decode(FIXTURE["semantic"], FIXTURE["acoustic"])
    assert_float32_close(audio, FIXTURE["audio"], num_layers(model))


def test_the_batch_rows_decode_alone_as_together():
    model = tiny_decoder()
    alone = model.decode(FIXTURE["semantic"][1:], FIXTURE["acoustic"][1:])
    assert_float32_close(alone, FIXTURE["audio"][1:], num_layers(model))


def test_the_reference_s_own_rounding_leaves_room_for_another_cpu_s():
    model = tiny_decoder().double()  # computed in float64; `decode` rounds its output to float32 once, at the end
    exact = model.decode(FIXTURE["semantic"], FIXTURE["acoustic"])
    assert {p.dtype for p in model.parameters()} == {torch.float64}
    assert_recorded_within_rounding(FIXTURE["audio"], exact, num_layers(model))


@pytest.mark.parametrize("which", BROKEN_LAYERS)
def test_a_broken_layer_fails_the_golden_comparison(which):
    model = tiny_decoder()
    with broken_layer(layers_run(model, lambda: model.decode(FIXTURE["semantic"], FIXTURE["acoustic"])), which):
        audio = model.decode(FIXTURE["semantic"], FIXTURE["acoustic"])
    assert not is_float32_close(audio, FIXTURE["audio"], num_layers(model))


def test_fewer_acoustic_levels_change_the_audio():
    """A level left out adds nothing (as the reference's `from_codes`), so the audio differs."""
    audio = tiny_decoder().decode(FIXTURE["semantic"], FIXTURE["acoustic"][:, :2])
    assert (audio - FIXTURE["audio"]).abs().max() > 1e-2


def test_decoder_state_keeps_exactly_the_decode_side():
    """From the reference's whole state dict (encoders, `in_proj`s, a 4th acoustic level), what decoding reads."""
    everything = {name: FIXTURE["state"].get(name, torch.empty(0)) for name in FIXTURE["reference_keys"]}
    kept = decoder_state(everything, n_acoustic=FIXTURE["config"]["n_acoustic"])
    assert len(everything) > len(kept)
    assert set(kept) == set(FIXTURE["state"]) == set(tiny_decoder().state_dict())


def test_the_tiny_output_length():
    frames = FIXTURE["semantic"].shape[1]
    assert FIXTURE["audio"].shape[1] == output_length(tiny_config(), frames) == 1920 * frames - 16


def meta_full() -> DualCodecDecoder:
    with torch.device("meta"):
        return DualCodecDecoder(full_config())


def test_the_full_model_has_the_official_decode_side_names_and_shapes():
    shapes = {name: tuple(p.shape) for name, p in meta_full().state_dict().items()}
    assert shapes == FULL["shapes"]
    assert sum(p.numel() for p in meta_full().parameters()) == FULL["params"] == 54_127_922


def test_the_full_model_s_output_length():
    """1920 samples a frame, less 4: the odd rate's transposed conv gives one sample short, which the last x4
    makes 4 (nothing in the reference pads or trims it)."""
    frames = FULL["frames"]
    with torch.device("meta"):
        semantic = torch.zeros(1, frames, dtype=torch.long)
        acoustic = torch.zeros(1, 3, frames, dtype=torch.long)
    audio = meta_full().decode(semantic, acoustic)
    assert audio.shape == (1, FULL["audio_length"])
    assert FULL["audio_length"] == output_length(full_config(), frames) == 1920 * frames - 4
