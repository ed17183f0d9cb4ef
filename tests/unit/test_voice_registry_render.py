"""`voice_registry` and the router get the same voice store settings from `voxlane serve` (`--data-dir`)."""
from __future__ import annotations

import re

from backend_python.voice_registry.store import VoiceStoreSettings
from server.cli import _add_server_flags, _serve_config
from server.serve import REPOSITORY, ServeConfig, render_repository

_PARAMETER = re.compile(r'key: "(\w+)" value: \{ string_value: "([^"]*)" \}')


def store_settings(repo, model: str) -> VoiceStoreSettings:
    return VoiceStoreSettings.from_parameters(dict(_PARAMETER.findall((repo / model / "config.pbtxt").read_text())))


def test_the_default_store_is_under_the_cache_and_both_models_agree():
    assert store_settings(REPOSITORY, "vox_ensemble") == store_settings(REPOSITORY, "voice_registry") \
        == VoiceStoreSettings()
    assert VoiceStoreSettings().data_dir == ""  # resolved in the server: $VOXLANE_CACHE/data, no path committed


def test_data_dir_and_model_reach_the_router_and_the_registry(tmp_path):
    import argparse
    parser = argparse.ArgumentParser()
    _add_server_flags(parser)
    config = _serve_config(parser.parse_args(["--data-dir", str(tmp_path / "data"), "--model", "qwen3-tts-tiny-base"]))
    repo = render_repository(config, tmp_path / "repo")
    expected = VoiceStoreSettings(model="qwen3-tts-tiny-base", data_dir=str(tmp_path / "data"))
    assert store_settings(repo, "vox_ensemble") == store_settings(repo, "voice_registry") == expected
    assert expected.directory == tmp_path / "data" / "voices" / "qwen3-tts-tiny-base"
    text = (repo / "voice_registry" / "config.pbtxt").read_text()
    assert "KIND_CPU" in text and "mps_active_thread_percentage" not in text  # not a lane: no GPU, no torch settings


def test_a_relative_data_dir_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert ServeConfig(data_dir="voices-here").voice_store_settings().data_dir == str(tmp_path / "voices-here")
    assert ServeConfig(device="cuda").voice_store_settings().data_dir == ""


def _inputs(model: str) -> dict[str, tuple[str, str]]:
    text = (REPOSITORY / model / "config.pbtxt").read_text()
    block = re.search(r"^input \[(.*?)^\]", text, re.S | re.M).group(1)
    return {name: (kind, dims) for name, kind, dims in
            re.findall(r'name: "(\w+)" data_type: (\w+) dims: \[ ([^\]]*) \]', block)}


def test_the_registry_takes_the_reference_inputs_as_vox_ensemble_does():
    from protocol.tensors import REFERENCE_INPUTS
    registry, router = _inputs("voice_registry"), _inputs("vox_ensemble")
    assert {name: registry[name] for name in REFERENCE_INPUTS} == {name: router[name] for name in REFERENCE_INPUTS}
    assert set(registry) == {"action", "name", "voice_file", *REFERENCE_INPUTS}  # voice_registry/model.py: ACTIONS
    assert registry["action"] == registry["name"] == ("TYPE_STRING", "1")
    assert 'output [\n  { name: "voices" data_type: TYPE_STRING dims: [ 1 ] }' in \
        (REPOSITORY / "voice_registry" / "config.pbtxt").read_text()


def test_admin_keys_reach_the_registry_as_their_hashes_only(tmp_path):
    """`voxlane serve --admin-key K1 --admin-key K2`: the registry holds both keys' SHA-256, never a key; without
    keys no check is rendered (writes stay open, as on a machine of one's own)."""
    import argparse
    from server.gateway.cli import add_key_flags
    from protocol.admin import key_hash
    parser = argparse.ArgumentParser()
    _add_server_flags(parser)
    add_key_flags(parser)
    config = _serve_config(parser.parse_args(["--admin-key", "key-one-1", "--admin-key", "key-two-2"]))
    text = (render_repository(config, tmp_path / "keyed") / "voice_registry" / "config.pbtxt").read_text()
    assert dict(_PARAMETER.findall(text))["admin_key_sha256"] == f"{key_hash('key-one-1')},{key_hash('key-two-2')}"
    assert "key-one-1" not in text and "key-two-2" not in text
    open_text = (render_repository(_serve_config(parser.parse_args([])), tmp_path / "open") / "voice_registry"
                 / "config.pbtxt").read_text()
    assert "admin_key_sha256" not in open_text
