"""How many KV positions the LM lane's pool gets: its memory budget over one position's bytes.

`kv_cache_gb` set: that much. Auto (0) on a GPU: the smaller of `GPU_KV_FRACTION` of the GPU's memory (which leaves
one server's LM weights, graphs and codec lanes the rest) and `FREE_KV_FRACTION` of what is free when the pool is
allocated, less `LANE_RESERVE_BYTES` for what this lane still allocates after it (its graphs, compile workspaces,
activations). The second term is what lets servers share a GPU: two servers started at once on one H200 failed when
the second LM asked for its fixed share (24.6 GiB) with 14.8 GiB free; sized from what is free, a later server gets
a smaller pool instead of none, and leaves part of the free memory to the lanes starting beside it. On the CPU
`CPU_KV_BYTES`. Never more than every slot's full row (`max_seq_len`), never less than one full row.
"""
from __future__ import annotations

import torch

from backend_python.engine.config import EngineConfig
from backend_python.models.base import SpeechLM

GPU_KV_FRACTION = 0.35  # an H200's 141 GB: ~49 GB, ~430k positions of the 1.7B talker (114 kB each)
FREE_KV_FRACTION = 0.6  # of the free memory (less the reserve): the rest for the lanes and servers starting beside it
LANE_RESERVE_BYTES = 6 << 30  # the LM lane's allocations after its pool: graphs of 8 buckets, workspaces
CPU_KV_BYTES = 128 << 20


def budget_bytes(config: EngineConfig, device: torch.device) -> int:
    if config.kv_cache_gb > 0:
        return int(config.kv_cache_gb * (1 << 30))
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        return auto_gpu_budget(total, free)
    return CPU_KV_BYTES


def auto_gpu_budget(total_bytes: int, free_bytes: int) -> int:
    """The auto pool on a GPU of total_bytes with free_bytes free now (see the module's docstring)."""
    return max(0, min(int(GPU_KV_FRACTION * total_bytes), int(FREE_KV_FRACTION * (free_bytes - LANE_RESERVE_BYTES))))


def pool_positions(model: SpeechLM, config: EngineConfig) -> int:
    """The pool's positions, whole blocks."""
    row = model.kv_positions_for(0, config.max_seq_len)
    per_position = model.kv_bytes_per_position()
    fit = budget_bytes(config, model.device) // per_position if per_position else config.max_slots * row
    positions = max(row, min(config.max_slots * row, fit))
    return -(-positions // config.kv_block_size) * config.kv_block_size
