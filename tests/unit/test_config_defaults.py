"""Each default stated once: the committed repository is what `voxlane serve` renders by default, and
every model parses its config.pbtxt into the same typed configs that ServeConfig built."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from backend_python.engine.config import EngineConfig
from backend_python.stub_common.params import LaneSettings
from server.cli import _add_server_flags, _serve_config
from server.serve import LANE_MODELS, REPOSITORY, ROUTER_MODEL, ServeConfig, render_repository
from protocol.models import REFINER_MODELS
from scheduler import ChunkingConfig, ChunkPlan, SchedulerConfig, ServingMode

CONTEXT = 25  # the codec context the LM lane takes from its model family
_PARAMETER = re.compile(r'parameters\s*\{\s*key:\s*"([^"]+)"\s*value:\s*\{\s*string_value:\s*"([^"]*)"\s*\}\s*\}')


def parameters(repo: Path, model: str) -> dict[str, str]:
    """A config.pbtxt's parameters, as Triton hands them to the model."""
    return dict(_PARAMETER.findall((repo / model / "config.pbtxt").read_text()))


def test_the_committed_repository_is_the_default_rendering(tmp_path):
    rendered = render_repository(ServeConfig(), tmp_path / "repo")
    models = sorted(path.parent.name for path in REPOSITORY.glob("*/config.pbtxt"))
    assert {ROUTER_MODEL, *LANE_MODELS, "voice_registry"} <= set(models)
    for model in models:
        committed = (REPOSITORY / model / "config.pbtxt").read_text()
        if model in REFINER_MODELS:  # a cascade's lanes: left out for the default model, committed as it would be
            assert not (rendered / model).exists()
            rendered_refiner = ServeConfig().render_config(model, committed)
            assert rendered_refiner == committed, model
            continue
        assert (rendered / model / "config.pbtxt").read_text() == committed, model


def test_the_committed_configs_parse_into_the_default_typed_configs():
    serve = ServeConfig()
    router = SchedulerConfig.from_dict(parameters(REPOSITORY, ROUTER_MODEL), ignore_unknown=True)
    engine = EngineConfig.from_parameters(parameters(REPOSITORY, "speechlm_lm"), CONTEXT)
    assert router == engine.scheduler == serve.scheduler_config()  # the router and the LM agree
    assert engine == serve.engine_config()
    for model in LANE_MODELS:
        assert LaneSettings.from_parameters(parameters(REPOSITORY, model)) == serve.lane_settings(model), model


def test_the_served_defaults_are_the_dataclass_defaults():
    serve = ServeConfig()
    assert serve.scheduler_config() == SchedulerConfig()
    assert serve.engine_config() == EngineConfig()
    assert serve.lane_settings("speechlm_lm") == LaneSettings()
    plan = ChunkPlan(SchedulerConfig().chunking)  # 2, 4, 8, 10, 10, … frames
    assert [plan.end(i) - plan.start(i) for i in range(5)] == [2, 4, 8, 10, 10]


def test_the_cli_defaults_are_serve_configs():
    import argparse
    parser = argparse.ArgumentParser()
    _add_server_flags(parser)
    assert _serve_config(parser.parse_args([])) == ServeConfig()


@pytest.mark.parametrize("serve", [
    ServeConfig(mode="timeshare", chunk_growth=None, admission="prefill-first", first_chunk_frames=3),
    ServeConfig(device="cuda", mode="partition", max_slots=8, max_queued=4, chunk_frames=12, chunk_growth=1.5),
    ServeConfig(device="cuda", gpus=("0", "1"), codec_gpu=1, num_threads=2),
])
def test_a_rendered_run_parses_back_into_its_typed_configs(tmp_path, serve):
    repo = render_repository(serve, tmp_path / "repo")
    assert SchedulerConfig.from_dict(parameters(repo, ROUTER_MODEL), ignore_unknown=True) == serve.scheduler_config()
    assert EngineConfig.from_parameters(parameters(repo, "speechlm_lm"), CONTEXT) == serve.engine_config()
    for model in LANE_MODELS:
        if model in REFINER_MODELS:
            assert not (repo / model).exists()  # a cascade's lanes only
            continue
        assert LaneSettings.from_parameters(parameters(repo, model)) == serve.lane_settings(model), model


def test_a_cascade_s_run_loads_its_refinement_lanes_on_their_own_shares(tmp_path):
    serve = ServeConfig(model="tontaube-tiny", device="cuda", refiner_sm_pct=30)
    repo = render_repository(serve, tmp_path / "repo")
    assert parameters(repo, ROUTER_MODEL)["refines"] == "true"
    shares = {model: LaneSettings.from_parameters(parameters(repo, model)).mps_active_thread_percentage
              for model in REFINER_MODELS}
    assert shares == {"refiner": 30, "refiner_urgent": 100}


def test_no_chunk_growth_reaches_the_lm_lane(tmp_path):
    """`--chunk-growth none` means 2, 10, 10, …: rendered as "none", not left at the repository's ramp."""
    repo = render_repository(ServeConfig(chunk_growth=None), tmp_path / "repo")
    chunking = EngineConfig.from_parameters(parameters(repo, "speechlm_lm"), CONTEXT).scheduler.chunking
    assert chunking == ChunkingConfig(first_chunk_frames=2, chunk_frames=10, chunk_growth=None)


def test_an_operators_repository_knob_survives_rendering(tmp_path):
    source = tmp_path / "source"
    render_repository(ServeConfig(), source)
    path = source / "codec" / "config.pbtxt"
    path.write_text(path.read_text().replace('key: "cuda_graphs" value: { string_value: "true" }',
                                             'key: "cuda_graphs" value: { string_value: "false" }'))
    repo = render_repository(ServeConfig(device="cuda"), tmp_path / "repo", source=source)
    assert LaneSettings.from_parameters(parameters(repo, "codec")).cuda_graphs is False


@pytest.mark.parametrize("mode, lm_tunes", [("voxlane", False), ("colocate", False), ("timeshare", True)])
def test_cudnn_benchmark_is_on_where_a_lane_decodes_audio(mode, lm_tunes):
    serve = ServeConfig(device="cuda", mode=mode)
    assert serve.lane_settings("codec").cudnn_benchmark and serve.lane_settings("codec_urgent").cudnn_benchmark
    assert serve.lane_settings("speechlm_lm").cudnn_benchmark is lm_tunes


@pytest.mark.parametrize("value", [True, False])
def test_lane_set_up_applies_cudnn_benchmark(monkeypatch, value):
    import torch

    from backend_python.models import registry
    from backend_python.stub_common.params import set_up_lane
    monkeypatch.setattr(registry, "resolve", lambda name: name)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", not value)
    threads = torch.get_num_threads()
    lane = LaneSettings(cudnn_benchmark=value)
    config = {"parameters": {key: {"string_value": v} for key, v in lane.to_parameters().items()}}
    try:
        setup = set_up_lane({"model_config": json.dumps(config)})
    finally:
        torch.set_num_threads(threads)
    assert torch.backends.cudnn.benchmark is value and setup.lane == lane and setup.spec == lane.model


def test_mode_names_are_the_enums():
    assert ServeConfig(mode="colocate").mode is ServingMode.COLOCATE
    with pytest.raises(ValueError, match="--mode must be one of timeshare, colocate, partition, voxlane"):
        ServeConfig(mode="fast")


@pytest.mark.parametrize("params", [{"pin_gpu": "yes"}, {"num_threads": "0"}, {"mps_active_thread_percentage": "x"}])
def test_bad_lane_parameters_are_refused(params):
    with pytest.raises(ValueError, match="lane parameter"):
        LaneSettings.from_parameters(params)


def test_a_model_family_brings_its_chunk_plan_and_given_fields_override_it(tmp_path):
    assert ServeConfig().chunking() == ChunkingConfig()  # Qwen3-TTS: the engine's ramp
    flash = ServeConfig(model="flashtts-0.5b")
    assert flash.chunking() == ChunkingConfig(first_chunk_frames=18, chunk_frames=18, chunk_growth=None)
    assert ServeConfig(model="flashtts-tiny", first_chunk_frames=6).chunking().first_chunk_frames == 6
    assert ServeConfig(model="cosyvoice3-tiny").chunking() == ChunkingConfig(first_chunk_frames=4, chunk_frames=25)
    assert ServeConfig(model="cosyvoice3-tiny", chunk_growth=None).chunking() == ChunkingConfig(
        first_chunk_frames=4, chunk_frames=25, chunk_growth=None)
    checkpoint = tmp_path / "my-flashtts"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text('{"model_type": "flashtts"}')
    assert ServeConfig(model=str(checkpoint)).chunking().first_chunk_frames == 18  # by its config's model_type
    repo = render_repository(flash, tmp_path / "repo")
    assert EngineConfig.from_parameters(parameters(repo, "speechlm_lm"), CONTEXT).scheduler.chunking == \
        flash.chunking()  # what the LM lane is given


def test_codec_steps_reach_the_lanes_and_a_codec_without_flow_steps_refuses_them(tmp_path):
    from backend_python.models import registry
    repo = render_repository(ServeConfig(model="cosyvoice3-tiny", codec_steps=4), tmp_path / "repo")
    for model in ("codec", "codec_urgent", "speechlm_lm"):
        assert LaneSettings.from_parameters(parameters(repo, model)).codec_steps == 4
    assert registry.load_codec(registry.resolve("cosyvoice3-tiny"), "cpu", "float32", steps=3).cfg.n_timesteps == 3
    assert registry.load_codec(registry.resolve("flashtts-tiny"), "cpu", "float32", steps=2).cfg.n_evals == 2
    with pytest.raises(ValueError, match="no flow steps"):
        registry.load_codec(registry.resolve("qwen3-tts-tiny"), "cpu", "float32", steps=2)
    with pytest.raises(ValueError, match="codec_steps"):
        LaneSettings(codec_steps=-1)


def test_a_model_family_brings_its_sm_shares_and_given_ones_override_them(tmp_path):
    assert (ServeConfig().lm_sm_pct, ServeConfig().codec_sm_pct) == (60, 40)  # Qwen3-TTS
    cosy = ServeConfig(model="cosyvoice3-0.5b", device="cuda")
    assert (cosy.lm_sm_pct, cosy.codec_sm_pct) == (40, 60)  # its codec is the heavy part
    assert (cosy.sm_percentage("speechlm_lm"), cosy.sm_percentage("codec"), cosy.sm_percentage("codec_urgent")) == \
        (40, 60, 100)
    given = ServeConfig(model="cosyvoice3-tiny", codec_sm_pct=30)
    assert (given.lm_sm_pct, given.codec_sm_pct) == (40, 30)  # a field given is kept, the other is the family's
    assert ServeConfig(model="flashtts-0.5b").codec_sm_pct == 40
    with pytest.raises(ValueError, match="--lm-sm-pct must be in"):
        ServeConfig(model="cosyvoice3-tiny", lm_sm_pct=0)


def test_on_a_gpu_a_lone_request_of_a_family_on_the_engines_ramp_starts_with_one_frame():
    """The GPU default (scheduler/chunking.py GPU_IDLE_FIRST_CHUNK_FRAMES): measured to pay on the H200, and it acts only on a lone request."""
    assert ServeConfig(device="cuda").chunking().first_chunk_frames_idle == 1
    assert ServeConfig(device="cpu").chunking().first_chunk_frames_idle is None  # the CPU tests pin the plan
    assert ServeConfig(device="cuda", first_chunk_frames_idle=0).chunking().first_chunk_frames_idle is None  # off
    assert ServeConfig(device="cuda", first_chunk_frames_idle=3).chunking().first_chunk_frames_idle == 3
    assert ServeConfig(device="cuda", first_chunk_frames=4).chunking().first_chunk_frames_idle is None  # a plan given
    for model in ("flashtts-0.5b", "cosyvoice3-tiny"):  # a family with its own plan keeps it
        assert ServeConfig(model=model, device="cuda").chunking().first_chunk_frames_idle is None
