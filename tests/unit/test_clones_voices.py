"""`families.clones_voices`, the torch-free answer to "has this model a voice encoder?" (the voice encoder lane asks it
before it imports torch), agrees with the registry's loaders: a model it calls voiceless must load no voice
encoder (its lane would refuse what it could serve), and a tiny model it calls cloning must load one."""
from __future__ import annotations

import json

import pytest

from backend_python.models import registry
from backend_python.models.families import clones_voices


@pytest.fixture(scope="module", autouse=True)
def cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VOXLANE_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield


TOLD = [name for name in registry.preset_names() if clones_voices(name) is not None]


def test_it_tells_the_common_models():
    assert {"qwen3-tts-tiny", "qwen3-tts-1.7b", "qwen3-tts-tiny-base", "orpheus-tiny", "flashtts-tiny",
            "voxtral-tiny"} <= set(TOLD)
    assert clones_voices("csm-tiny") is None and clones_voices("no-such-model") is None


@pytest.mark.parametrize("name", TOLD)
def test_it_agrees_with_the_registry(name):
    spec = registry.resolve(name)
    if clones_voices(name) and spec.checkpoint is None:
        pytest.skip("a full-size cloning preset: its encoder is too large to build here")
    encoder = registry.load_voice_encoder(spec, device="cpu", dtype="float32")
    assert (encoder is not None) == clones_voices(name)


@pytest.mark.parametrize("kind, clones", [("custom_voice", False), ("base", True), ("voice_design", False)])
def test_a_qwen3_tts_checkpoint_directory_is_read_by_its_config(tmp_path, kind, clones):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3_tts", "tts_model_type": kind}))
    (tmp_path / "speech_tokenizer").mkdir()  # the codec: without it the directory is no Qwen3-TTS checkpoint
    assert clones_voices(str(tmp_path)) is clones
