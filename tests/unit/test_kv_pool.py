"""A pooled KV cache (each stream a contiguous extent sized to its need, placed anywhere in one pool) decodes
exactly what static rows of max_seq_len decode, for every family; a padded prefill row never writes into
another stream's extent."""
from __future__ import annotations

import pytest
import torch

from backend_python.models import registry
from backend_python.models.base import SamplingParams
from backend_python.models.layers.decoder import KVCache
from tests.unit.lm_graph_helpers import assert_pooled_equals_static, needs_cuda

SAMPLED = SamplingParams(temperature=0.9, top_k=50, top_p=0.9, repetition_penalty=1.05)
GREEDY = SamplingParams(temperature=0.0, repetition_penalty=1.05)
PRESETS = ("qwen3-tts-tiny", "csm-tiny", "orpheus-tiny", "cosyvoice3-tiny", "flashtts-tiny",
           "higgs-v3-tiny")


def skip_without_codec(preset: str) -> None:
    """A tiny Orpheus checkpoint is built with its SNAC codec: a machine without `snac` cannot build it."""
    if preset.startswith("orpheus"):
        pytest.importorskip("snac")


@pytest.mark.parametrize("preset", PRESETS)
def test_pooled_extents_decode_what_static_rows_decode(preset):
    skip_without_codec(preset)
    lm = registry.load_lm(registry.resolve(preset), device="cpu", dtype="float32")
    assert_pooled_equals_static(lm, [SAMPLED, GREEDY, SAMPLED], num_frames=4)


def test_a_write_past_a_row_s_extent_lands_on_the_scratch_row():
    cache = KVCache.allocate(1, 3, 1, 8, 2, torch.device("cpu"), torch.float32, pool_positions=10)
    cache.place(0, 0, 4)
    cache.place(1, 4, 6)
    index = cache.write_index(torch.tensor([0, 1]), torch.tensor([[2, 3, 4, 5], [2, 3, 4, 5]]))
    assert index.tolist() == [[2, 3, 14, 15], [6, 7, 8, 9]]  # row 0's positions 4, 5: the scratch row (10..17)


def test_an_extent_outside_the_pool_is_refused():
    cache = KVCache.allocate(1, 3, 1, 8, 2, torch.device("cpu"), torch.float32, pool_positions=10)
    with pytest.raises(ValueError, match="outside the pool"):
        cache.place(0, 6, 5)


@needs_cuda
@pytest.mark.parametrize("preset", ("qwen3-tts-tiny", "orpheus-tiny", "cosyvoice3-tiny"))
def test_pooled_extents_under_cuda_graphs_decode_what_static_rows_decode(preset):
    """The frame graphs and flash attention read each row's keys from its extent's start."""
    skip_without_codec(preset)
    lm = registry.load_lm(registry.resolve(preset), device="cuda", dtype="bfloat16")
    assert_pooled_equals_static(lm, [SAMPLED, GREEDY, SAMPLED], num_frames=4, device="cuda")


GIB = 1 << 30


def test_the_auto_pool_on_a_gpu_takes_its_share_or_what_the_free_memory_leaves():
    """One server alone on an idle H200 keeps the fixed share; a second server started beside the first (the
    figures tool's `voxlane` and `timeshare` at once) sizes its pool from the memory free when it allocates, leaving
    part of it to the lanes that start beside it, instead of failing as it did (24.6 GiB asked, 14.8 GiB free)."""
    from backend_python.engine import kv_memory
    total = 140 * GIB
    alone = kv_memory.auto_gpu_budget(total, free_bytes=135 * GIB)
    assert alone == int(kv_memory.GPU_KV_FRACTION * total)  # 49 GiB: the fixed share binds
    second = kv_memory.auto_gpu_budget(total, free_bytes=14.8 * GIB)
    assert 0 < second < 14.8 * GIB - kv_memory.LANE_RESERVE_BYTES  # fits, with room left for the lane's graphs
    assert second == int(kv_memory.FREE_KV_FRACTION * (14.8 * GIB - kv_memory.LANE_RESERVE_BYTES))
    assert kv_memory.auto_gpu_budget(total, free_bytes=4 * GIB) == 0  # less than the reserve: the one-row floor


def test_the_pool_is_at_least_one_row_and_at_most_every_slot_s(monkeypatch):
    from backend_python.engine import kv_memory
    from backend_python.engine.config import EngineConfig
    from backend_python.models.qwen3_tts import Qwen3TTSLM, preset_config
    lm = Qwen3TTSLM.from_config(preset_config("qwen3-tts-tiny"), seed=0)
    config = EngineConfig(max_slots=4, max_seq_len=256, kv_block_size=16)
    row = lm.kv_positions_for(0, 256)
    monkeypatch.setattr(kv_memory, "budget_bytes", lambda config, device: 0)
    assert kv_memory.pool_positions(lm, config) == -(-row // 16) * 16
    monkeypatch.setattr(kv_memory, "budget_bytes", lambda config, device: 1 << 40)
    assert kv_memory.pool_positions(lm, config) == -(-4 * row // 16) * 16
