"""Rendering the run copy of the model repository for `voxlane serve`."""
from __future__ import annotations

import os
import re

import pytest

from server.serve import REPOSITORY, ServeConfig, render_repository, set_parameter


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


@pytest.mark.parametrize("mode, lm, codec, urgent", [
    ("voxlane", "70", "30", "100"), ("partition", "70", "30", "100"),
    ("colocate", "100", "100", "100"), ("timeshare", "100", "100", "100")])
def test_sm_percentages_follow_the_mode(tmp_path, mode, lm, codec, urgent):
    config = ServeConfig(device="cuda", mode=mode, lm_sm_pct=70, codec_sm_pct=30)
    repo = render_repository(config, tmp_path / "repo")
    for model, pct in (("speechlm_lm", lm), ("codec", codec), ("codec_urgent", urgent)):
        text = (repo / model / "config.pbtxt").read_text()
        assert f'key: "mps_active_thread_percentage" value: {{ string_value: "{pct}" }}' in text, model
    assert f'key: "mode" value: {{ string_value: "{mode}" }}' in (repo / "speechlm_lm" / "config.pbtxt").read_text()


def test_no_partition_means_whole_gpu_everywhere():
    config = ServeConfig(device="cuda", mode="voxlane", partition="none")
    assert not config.uses_mps and config.sm_percentage("codec") == 100


@pytest.mark.parametrize("kwargs, message", [
    (dict(mode="fast"), "--mode must be one of"),
    (dict(partition="mps"), "needs --device cuda"),
    (dict(device="cuda", codec_sm_pct=0), "--codec-sm-pct must be in"),
])
def test_bad_serve_settings_are_refused_clearly(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ServeConfig(**kwargs)


@pytest.mark.parametrize("mode, codec", [("voxlane", "1"), ("partition", "0"), ("colocate", "0")])
def test_the_background_codec_yields_in_voxlane_mode_only(tmp_path, mode, codec):
    """By default: voxlane has the urgent lane to take what a yielding background lane makes late."""
    repo = render_repository(ServeConfig(device="cuda", mode=mode), tmp_path / "repo")
    for model, priority in (("speechlm_lm", "0"), ("codec", codec), ("codec_urgent", "0")):
        text = (repo / model / "config.pbtxt").read_text()
        assert f'key: "mps_client_priority" value: {{ string_value: "{priority}" }}' in text, model
    assert ServeConfig(device="cuda", partition="none").mps_priority("codec") == 0  # no MPS
    assert ServeConfig(device="cuda", codec_mps_priority=0).mps_priority("codec") == 0


def test_the_routing_levers_reach_the_router(tmp_path):
    config = ServeConfig(device="cuda", urgent_budget=4, margin_quantile=0.95)
    router = (render_repository(config, tmp_path / "repo") / "vox_ensemble" / "config.pbtxt").read_text()
    assert 'key: "urgent_budget" value: { string_value: "4" }' in router
    assert 'key: "margin_quantile" value: { string_value: "0.95" }' in router


def test_a_lane_below_normal_priority_sets_it_before_cuda_starts(monkeypatch):
    from backend_python.stub_common.params import LaneSettings
    for name in ("CUDA_MPS_CLIENT_PRIORITY", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"):
        monkeypatch.delenv(name, raising=False)
    LaneSettings(device="cuda", mps_client_priority=0).apply_mps_limit()
    LaneSettings(device="cpu", mps_client_priority=1).apply_mps_limit()
    assert "CUDA_MPS_CLIENT_PRIORITY" not in os.environ
    settings = LaneSettings.from_parameters({"device": "cuda", "mps_client_priority": "1"})
    settings.apply_mps_limit()
    assert os.environ["CUDA_MPS_CLIENT_PRIORITY"] == "1"
    with pytest.raises(ValueError):
        LaneSettings(mps_client_priority=2)


@pytest.mark.parametrize("mode, pct", [("voxlane", "30"), ("partition", "30"), ("colocate", "100"), ("timeshare", "100")])
def test_the_voice_encoder_lane_is_rendered_in_every_mode_with_its_own_share(tmp_path, mode, pct):
    repo = render_repository(ServeConfig(device="cuda", mode=mode, encoder_sm_pct=30), tmp_path / "repo")
    text = (repo / "voice_encoder" / "config.pbtxt").read_text()
    assert f'key: "mps_active_thread_percentage" value: {{ string_value: "{pct}" }}' in text
    assert "KIND_GPU" in text and "KIND_CPU" not in text and 'key: "max_ref_audio_s" value: { string_value: "60" }' in text
    cpu = (render_repository(ServeConfig(mode=mode), tmp_path / "cpu") / "voice_encoder" / "config.pbtxt").read_text()
    assert "KIND_CPU" in cpu and 'key: "min_ref_audio_s" value: { string_value: "0.5" }' in cpu


def test_the_voice_encoder_shares_the_codec_gpu_when_disaggregated():
    config = ServeConfig(device="cuda", gpus=("0", "1"), codec_gpu=1)
    assert config.gpu_of("voice_encoder") == 1 and config.gpu_of("speechlm_lm") == 0
    with pytest.raises(ValueError, match="--encoder-sm-pct must be in"):
        ServeConfig(device="cuda", encoder_sm_pct=0)


def test_the_background_codec_lanes_batcher_is_rendered_and_checked(tmp_path):
    import argparse

    from server.cli import _add_server_flags, _serve_config

    config = ServeConfig(device="cuda", codec_max_batch=16, codec_queue_delay_us=8000)
    repo = render_repository(config, tmp_path / "repo")
    background = (repo / "codec" / "config.pbtxt").read_text()
    assert re.search(r"^max_batch_size: 16$", background, re.M)
    assert "dynamic_batching { max_queue_delay_microseconds: 8000 }" in background
    urgent = (repo / "codec_urgent" / "config.pbtxt").read_text()  # the urgent lane keeps its own: no delay
    assert "max_queue_delay_microseconds: 0" in urgent
    assert config.render_config("codec", (REPOSITORY / "codec" / "config.pbtxt").read_text()) == background
    parser = argparse.ArgumentParser()
    _add_server_flags(parser)
    given = _serve_config(parser.parse_args(["--codec-max-batch", "8", "--codec-queue-delay-us", "0"]))
    assert (given.codec_max_batch, given.codec_queue_delay_us) == (8, 0)
    for bad, message in (({"codec_max_batch": 0}, "--codec-max-batch must be in"),
                         ({"codec_max_batch": 64}, "CUDA graphs"),
                         ({"codec_queue_delay_us": -1}, "--codec-queue-delay-us must be in")):
        with pytest.raises(ValueError, match=message):
            ServeConfig(**bad)


def test_a_codec_lookahead_given_replaces_the_familys_in_the_lm_lane_only(tmp_path):
    """`--codec-lookahead-frames` reaches the LM lane's engine, which cuts the chunks; absent, the family's holds."""
    from backend_python.engine.config import EngineConfig
    from backend_python.models.base import CodecWindowing

    family = CodecWindowing(left_context_frames=10, lookahead_frames=10, overlap_frames=4)
    repo = render_repository(ServeConfig(model="zonos-tiny", codec_lookahead_frames=2), tmp_path / "repo")
    lm = (repo / "speechlm_lm" / "config.pbtxt").read_text()
    assert 'key: "codec_lookahead_frames" value: { string_value: "2" }' in lm
    assert "codec_lookahead_frames" not in (repo / "codec" / "config.pbtxt").read_text()
    given = EngineConfig.from_parameters({"codec_lookahead_frames": "2"}, family)
    assert (given.codec_left_context_frames, given.codec_lookahead_frames, given.codec_overlap_frames) == (10, 2, 2)
    kept = render_repository(ServeConfig(model="zonos-tiny"), tmp_path / "kept") / "speechlm_lm" / "config.pbtxt"
    assert "codec_lookahead_frames" not in kept.read_text()
    assert EngineConfig.from_parameters({}, family).codec_lookahead_frames == 10
    with pytest.raises(ValueError, match="codec_lookahead_frames 'two' is not an integer"):
        EngineConfig.from_parameters({"codec_lookahead_frames": "two"}, family)
    with pytest.raises(ValueError, match="--codec-lookahead-frames must be >= 0"):
        ServeConfig(codec_lookahead_frames=-1)


def test_the_audio_cap_reaches_the_router_and_the_lm_and_lowers_the_default_under_it(tmp_path):
    """`--max-audio-seconds` bounds a stream's length (and so a stopping pod's drain): both models read it, and a
    request that names no cap gets the default (60 s) or, under a lower ceiling, the ceiling."""
    from backend_python.stub_common.request_inputs import RequestLimits
    repo = render_repository(ServeConfig(max_audio_seconds=45), tmp_path / "repo")
    for model in ("vox_ensemble", "speechlm_lm"):
        text = (repo / model / "config.pbtxt").read_text()
        assert 'key: "max_audio_seconds" value: { string_value: "45" }' in text, model
    limits = RequestLimits.from_parameters(ServeConfig(max_audio_seconds=45).request_limit_parameters())
    assert (limits.max_audio_seconds, limits.default_audio_seconds_for("Hello.")) == (45.0, 45.0)
    assert RequestLimits.from_parameters({}).default_audio_seconds_for("Hello.") == 60.0
    with pytest.raises(ValueError, match="max-audio-seconds"):
        ServeConfig(max_audio_seconds=0)
