"""Tiny presets materialise once per version of the model code: a cached checkpoint that other code built (a
preset whose shape has since changed) is built again, not served stale."""
from __future__ import annotations

import json

from backend_python.models import registry

PRESET = "qwen3-tts-tiny"


def weights_id(path) -> tuple[int, int]:
    stat = (path / "model.safetensors").stat()
    return stat.st_ino, stat.st_mtime_ns


def test_a_cached_tiny_checkpoint_is_reused_while_the_model_code_is_the_same(tmp_path, monkeypatch):
    monkeypatch.setenv("VOXLANE_CACHE", str(tmp_path))
    path = registry.resolve(PRESET).checkpoint
    assert path.parent == tmp_path and (path / registry.BUILT_BY).read_text() == registry.model_code_fingerprint()
    built = weights_id(path)
    assert registry.resolve(PRESET).checkpoint == path and weights_id(path) == built


def test_one_built_by_other_model_code_is_built_again(tmp_path, monkeypatch):
    monkeypatch.setenv("VOXLANE_CACHE", str(tmp_path))
    path = registry.resolve(PRESET).checkpoint
    config = json.loads((path / "config.json").read_text())
    stale = {**config, "talker_config": {**config["talker_config"], "num_code_groups": 16}}
    (path / "config.json").write_text(json.dumps(stale))
    (path / registry.BUILT_BY).write_text("0123456789abcdef")
    assert registry.resolve(PRESET).checkpoint == path
    assert json.loads((path / "config.json").read_text()) == config
    assert (path / registry.BUILT_BY).read_text() == registry.model_code_fingerprint()


def test_one_from_before_the_stamp_is_built_again(tmp_path, monkeypatch):
    monkeypatch.setenv("VOXLANE_CACHE", str(tmp_path))
    path = registry.resolve(PRESET).checkpoint
    (path / registry.BUILT_BY).unlink()
    built = weights_id(path)
    registry.resolve(PRESET)
    assert weights_id(path) != built and (path / registry.BUILT_BY).is_file()
