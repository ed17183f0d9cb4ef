"""The CosyVoice 3 family through the registry: the tiny preset materialises as a checkpoint (LM, voices, codec/,
campplus/) and loads back; its voices, codec windows and codec condition are what the LM lane and the codec
lanes read; a reference's x-vector from the voice encoder conditions the codec in place of a preset voice."""
from __future__ import annotations

import os

import pytest
import torch

from backend_python.models import registry
from backend_python.models.base import CodecWindowing, DecodeBatch, SamplingParams, VoiceReference

torch.set_flush_denormal(True)


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    """The tiny preset, materialised in a fresh cache (restored afterwards)."""
    saved = os.environ.get("VOXLANE_CACHE")
    os.environ["VOXLANE_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    yield registry.resolve("cosyvoice3-tiny")
    if saved is None:
        os.environ.pop("VOXLANE_CACHE")
    else:
        os.environ["VOXLANE_CACHE"] = saved


@pytest.fixture(scope="module")
def models(spec):
    return (registry.load_lm(spec, "cpu", "float32"), registry.load_codec(spec, "cpu", "float32"),
            registry.load_voice_encoder(spec, "cpu", "float32"))


def test_presets_resolve_to_the_family(spec):
    assert spec.family == "cosyvoice3" and spec.checkpoint is not None
    assert "cosyvoice3-tiny" in registry.preset_names() and "cosyvoice3-0.5b" in registry.preset_names()
    assert registry.resolve(str(spec.checkpoint)).family == "cosyvoice3"  # the directory itself is detected
    assert registry.resolve("cosyvoice3-0.5b").preset == "cosyvoice3-0.5b"


def test_what_the_lanes_read_without_loading_matches_the_loaded_models(spec, models):
    lm, codec, _ = models
    assert registry.preset_voices(spec) == lm.voices == ("default", "alice", "bob")
    assert registry.codec_windowing(spec) == codec.shape.window
    assert registry.codec_windowing(spec).lookahead_frames > 0
    assert isinstance(registry.codec_windowing(registry.resolve("cosyvoice3-0.5b")), CodecWindowing)
    assert lm.frame_rate == codec.shape.frame_rate == 25.0
    assert lm.num_codebooks == codec.num_codebooks == 1 and lm.vocab.num_codes == codec.codebook_size
    assert codec.condition_dim == lm.config.speaker_embedding_dim


def speak(lm, codec, prompt, num_frames: int = 12) -> torch.Tensor:
    """num_frames sampled tokens (seeded), decoded by the codec with the prompt's condition -> audio."""
    lm.allocate_slots(1, 128)
    lm.prefill(0, prompt)
    batch = DecodeBatch([0], [SamplingParams()], [torch.Generator().manual_seed(1)], [True])
    codes = torch.cat([lm.decode(batch)[0] for _ in range(num_frames)])  # [T, 1]
    return codec.decode_windows([(codes, 0)], [lm.codec_condition(prompt)])[0]


def test_the_voice_or_the_reference_conditions_the_codec_not_the_tokens(models):
    lm, codec, encoder = models
    reference = VoiceReference(encoder.encode([0.1 * torch.randn(16000, generator=torch.Generator().manual_seed(0))],
                                              [True])[0])
    prompts = [lm.encode_prompt("Hello world.", voice) for voice in ("alice", "bob")]
    prompts.append(lm.encode_prompt("Hello world.", None, reference))
    audios = [speak(lm, codec, p) for p in prompts]
    assert torch.equal(lm.codec_condition(prompts[2]), reference.tensors["speaker_embedding"])
    assert audios[0].shape == (12 * codec.samples_per_frame,) and audios[0].abs().max() > 0
    assert not torch.allclose(audios[0], audios[1]) and not torch.allclose(audios[0], audios[2])
