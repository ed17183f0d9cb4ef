"""SchedulerConfig: validation and building from Triton parameters."""
import math

import pytest

from scheduler import AdmissionPolicyName, ChunkingConfig, SchedulerConfig, ServingMode


def test_defaults():
    config = SchedulerConfig()
    assert config.mode is ServingMode.VOXLANE
    assert config.admission_policy is AdmissionPolicyName.DEADLINE_AWARE
    assert config.chunking == ChunkingConfig()


def test_from_dict_parses_strings_and_triton_form():
    config = SchedulerConfig.from_dict({
        "mode": "partition",
        "margin_floor_s": "0.02",
        "safety_factor": {"string_value": "1.5"},
        "admission_policy": "prefill-first",
        "max_wait_s": "inf",
        "first_chunk_frames": " 2 ",
        "chunk_frames": "8",
    })
    assert config.mode is ServingMode.PARTITION
    assert config.margin_floor_s == 0.02
    assert config.safety_factor == 1.5
    assert config.admission_policy is AdmissionPolicyName.PREFILL_FIRST
    assert math.isinf(config.max_wait_s)
    assert config.chunking == ChunkingConfig(first_chunk_frames=2, chunk_frames=8)


def test_from_dict_partial_chunking_keeps_other_default():
    config = SchedulerConfig.from_dict({"chunk_frames": "12"})
    assert config.chunking == ChunkingConfig(first_chunk_frames=ChunkingConfig().first_chunk_frames,
                                             chunk_frames=12)


def test_from_dict_unknown_keys():
    params = {"mode": "colocate", "mps_active_thread_percentage": "25"}
    with pytest.raises(ValueError, match="unknown"):
        SchedulerConfig.from_dict(params)
    assert SchedulerConfig.from_dict(params, ignore_unknown=True).mode is ServingMode.COLOCATE


@pytest.mark.parametrize("params", [
    {"mode": "fast"},
    {"admission_policy": "lottery"},
    {"margin_floor_s": "abc"},
    {"margin_floor_s": "-0.1"},
    {"margin_floor_s": "nan"},
    {"safety_factor": "inf"},
    {"max_wait_s": "-1"},
    {"latency_alpha": "0"},
    {"first_chunk_frames": "0"},
    {"chunk_frames": "2.5"},
    {"mode": {"int64_value": 3}},
])
def test_from_dict_rejects_bad_values(params):
    with pytest.raises(ValueError):
        SchedulerConfig.from_dict(params)


def test_config_is_frozen_and_typed():
    config = SchedulerConfig()
    with pytest.raises(AttributeError):
        config.mode = ServingMode.TIMESHARE
    with pytest.raises(ValueError):
        SchedulerConfig(mode="voxlane_typo")
