"""`registry.preset_voices` reads a model's preset voices off its config: the same names its LM has."""
from __future__ import annotations

import os

import pytest

from backend_python.models import registry


@pytest.fixture(scope="module")
def model_cache_env(tmp_path_factory):
    """Tiny presets materialise in a fresh cache (restored afterwards)."""
    saved = os.environ.get("VOXLANE_CACHE")
    os.environ["VOXLANE_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    yield
    if saved is None:
        os.environ.pop("VOXLANE_CACHE")
    else:
        os.environ["VOXLANE_CACHE"] = saved


@pytest.mark.parametrize("preset", ["qwen3-tts-tiny", "qwen3-tts-tiny-base", "csm-tiny", "orpheus-tiny", "zonos-tiny"])
def test_preset_voices_are_the_lm_s_voices(model_cache_env, preset):
    spec = registry.resolve(preset)
    assert registry.preset_voices(spec) == tuple(registry.load_lm(spec, "cpu", "float32").voices)


def test_a_base_model_has_none_and_a_custom_voice_model_has_its_speakers(model_cache_env):
    assert registry.preset_voices(registry.resolve("qwen3-tts-tiny-base")) == ()
    assert registry.preset_voices(registry.resolve("qwen3-tts-1.7b"))[:2] == ("vivian", "serena")


def test_a_zonos_random_preset_lists_the_unconditional_voice_first():
    assert registry.preset_voices(registry.resolve("zonos-1.6b")) == ("default", "amber", "basil")
