"""How many KV positions the LM lane's pool gets: its memory budget over one position's bytes.

`kv_cache_gb` set: that much. Auto (0): `GPU_KV_FRACTION` of the GPU's memory, which leaves the LM's weights,
its graphs and the codec lanes beside it (separate processes on the same GPU) the rest; on the CPU
`CPU_KV_BYTES`. Never more than every slot's full row (`max_seq_len`), never less than one full row.
"""
from __future__ import annotations

import torch

from backend_python.engine.config import EngineConfig
from backend_python.models.base import SpeechLM

GPU_KV_FRACTION = 0.35  # an H200's 141 GB: ~49 GB, ~430k positions of the 1.7B talker (114 kB each)
CPU_KV_BYTES = 128 << 20


def budget_bytes(config: EngineConfig, device: torch.device) -> int:
    if config.kv_cache_gb > 0:
        return int(config.kv_cache_gb * (1 << 30))
    if device.type == "cuda":
        return int(GPU_KV_FRACTION * torch.cuda.get_device_properties(device).total_memory)
    return CPU_KV_BYTES


def pool_positions(model: SpeechLM, config: EngineConfig) -> int:
    """The pool's positions, whole blocks."""
    row = model.kv_positions_for(0, config.max_seq_len)
    per_position = model.kv_bytes_per_position()
    fit = budget_bytes(config, model.device) // per_position if per_position else config.max_slots * row
    positions = max(row, min(config.max_slots * row, fit))
    return -(-positions // config.kv_block_size) * config.kv_block_size
