"""Rendering the run copy of the model repository for `voxlane serve`."""
from __future__ import annotations

import pytest

from clients.serve import REPOSITORY, ServeConfig, render_repository, set_parameter


def test_set_parameter_replaces_and_adds():
    text = 'parameters { key: "model" value: { string_value: "a" } }\n'
    assert set_parameter(text, "model", "b").count('"b"') == 1
    assert 'key: "device"' in set_parameter(text, "device", "cuda")


def test_render_writes_settings_into_each_model(tmp_path):
    config = ServeConfig(model="qwen3-tts-1.7b", device="cuda", mode="colocate", max_slots=64)
    repo = render_repository(config, tmp_path / "repo")
    lm = (repo / "speechlm_lm" / "config.pbtxt").read_text()
    assert '"qwen3-tts-1.7b"' in lm and '"bfloat16"' in lm and 'key: "max_slots" value: { string_value: "64" }' in lm
    assert "KIND_GPU" in lm and "KIND_CPU" not in lm
    for lane in ("codec", "codec_urgent"):
        text = (repo / lane / "config.pbtxt").read_text()
        assert "KIND_GPU" in text and '"qwen3-tts-1.7b"' in text
    router = (repo / "vox_ensemble" / "config.pbtxt").read_text()
    assert 'key: "mode" value: { string_value: "colocate" }' in router and "KIND_CPU" in router
    assert (REPOSITORY / "speechlm_lm" / "config.pbtxt").read_text().count("qwen3-tts-tiny") == 1


def test_unbuilt_mode_is_refused_clearly():
    with pytest.raises(ValueError, match="timeshare is not available yet"):
        ServeConfig(mode="timeshare")
