"""The voice-cloning floor (models/base.py): a model without voice cloning says so when given a
reference, keeps its old call, and the registry gives it no voice encoder. (CSM clones: test_csm_voice_clone.py.)"""
from __future__ import annotations

import pytest
import torch

from backend_python.models import registry
from backend_python.models.base import VoiceReference
from backend_python.models.orpheus.lm import OrpheusLM
from backend_python.models.orpheus.presets import preset_config as orpheus_preset
from backend_python.models.qwen3_tts import Qwen3TTSLM, preset_config as qwen3_preset

REFERENCE = VoiceReference(tensors={"speaker_embedding": torch.zeros(8)}, text="a reference")


@pytest.fixture(scope="module", params=["qwen3-tts-tiny", "orpheus-tiny"])
def lm(request):
    build = {"qwen3-tts-tiny": lambda: Qwen3TTSLM.from_config(qwen3_preset("qwen3-tts-tiny")),
             "orpheus-tiny": lambda: OrpheusLM.from_config(orpheus_preset("orpheus-tiny"))}
    return build[request.param]()


def test_a_model_without_cloning_rejects_a_reference_by_name(lm):
    assert not lm.supports_reference
    with pytest.raises(ValueError, match="cannot clone a voice"):
        lm.encode_prompt("Hello there.", None, REFERENCE)


def test_the_old_call_and_an_explicit_none_build_the_same_prompt(lm):
    old, new = lm.encode_prompt("Hello there.", None), lm.encode_prompt("Hello there.", None, reference=None)
    assert old.num_tokens == new.num_tokens and old.tensors.keys() == new.tensors.keys()
    assert all(torch.equal(old.tensors[k], new.tensors[k]) for k in old.tensors)


@pytest.mark.parametrize("family, preset", [("orpheus", "orpheus-3b"), ("qwen3-tts", "qwen3-tts-1.7b")])
def test_registry_gives_no_voice_encoder_to_a_model_without_cloning(family, preset):
    spec = registry.ModelSpec(preset, family, preset=preset)
    assert registry.load_voice_encoder(spec, "cpu", "float32") is None


def test_a_reference_has_no_transcript_unless_given():
    assert VoiceReference(tensors={}).text is None
