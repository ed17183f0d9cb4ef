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
