"""Voxtral-TTS against a public reference on tiny random weights (tests/fixtures/voxtral_golden.pt, made by
tools/make_voxtral_fixture.py from the `Flinlix/Faster-Voxtral-4B-TTS` port's own modules at vllm-omni's 7 Euler
steps): the flow head's frame (greedy semantic code, guided Euler flow from given noise, FSQ), the 37-codebook
audio embedding, and the codec's decoder (weight norm folded by our loader)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from backend_python.models.voxtral.codec import VoxtralCodec
from backend_python.models.voxtral.config import (NUM_AUDIO_SPECIALS, BackboneConfig, CodecConfig, FlowHeadConfig,
                                                  VoxtralConfig)
from backend_python.models.voxtral.lm import VoxtralLM
from tests.golden import assert_float32_close, num_layers

FIXTURE_PATH = Path(__file__).parents[1] / "fixtures" / "voxtral_golden.pt"


def fixture_config(s: dict) -> VoxtralConfig:
    backbone = BackboneConfig(dim=s["dim"], n_layers=1, head_dim=s["head_dim"], hidden_dim=s["hidden_dim"],
                              n_heads=s["heads"], n_kv_heads=s["kv_heads"], vocab_size=1256)
    flow = FlowHeadConfig(input_dim=s["dim"], dim=s["dim"], n_layers=s["flow_layers"], head_dim=s["head_dim"],
                          hidden_dim=s["hidden_dim"], n_heads=s["heads"], n_kv_heads=s["kv_heads"],
                          n_decoding_steps=s["steps"], cfg_alpha=s["cfg"])
    codec = CodecConfig(semantic_codebook_size=s["semantic"], semantic_dim=s["semantic_dim"], dim=s["codec_dim"],
                        hidden_dim=s["codec_hidden"], n_heads=s["codec_heads"], n_kv_heads=s["codec_heads"],
                        head_dim=s["codec_head_dim"], voice={"a": 0})
    return VoxtralConfig(backbone, flow, codec, semantic_codebook_size=s["semantic"])


@pytest.fixture(scope="module")
def fixture() -> dict:
    return torch.load(FIXTURE_PATH)


@pytest.fixture(scope="module")
def lm(fixture) -> VoxtralLM:
    model = VoxtralLM.from_config(fixture_config(fixture["shape"]), seed=0)
    missing, unexpected = model.load_state_dict(fixture["lm_state"], strict=False)
    assert not unexpected and all(k.startswith("model.") for k in missing)
    return model


def test_the_flow_head_s_frame_is_the_reference_s(lm, fixture):
    head, hidden = lm.acoustic_transformer, fixture["hidden"]
    with torch.no_grad():
        semantic = head.semantic_logits(hidden, torch.zeros(hidden.shape[0], dtype=torch.bool)).argmax(dim=-1)
        acoustic = head.quantize(head.acoustic_values(hidden, fixture["noise"]))
    expected = fixture["frame_codes"]
    assert torch.equal(semantic, expected[:, 0])
    live = expected[:, 0] != 1  # the reference writes EMPTY where the frame ended
    assert live.sum() >= 4
    assert torch.equal(acoustic[live] + NUM_AUDIO_SPECIALS, expected[live, 1:])


def test_the_audio_embedding_is_the_reference_s(lm, fixture):
    mem_offsets = torch.tensor((0,) + lm.config.codebook_sizes[:-1]).cumsum(0)
    with torch.no_grad():
        ours = lm.audio_embeddings(fixture["embed_codes"] + mem_offsets).sum(dim=-2)
        # through the frame's own path: unshifted codes plus the offsets past the specials
        framed = lm.embed_frame(fixture["embed_codes"] - NUM_AUDIO_SPECIALS, mem_offsets + NUM_AUDIO_SPECIALS)
    assert_float32_close(ours, fixture["embeds"], depth=1)  # a sum of the 37 codebooks' rows
    assert_float32_close(framed, fixture["embeds"], depth=1)


def test_the_codec_s_audio_is_the_reference_s(fixture):
    codec = VoxtralCodec.from_state(fixture_config(fixture["shape"]).codec, fixture["codec_state"])
    audio = codec.decode(fixture["codec_codes"])
    assert audio.shape == fixture["audio"].shape
    assert_float32_close(audio, fixture["audio"], num_layers(codec))
