"""Llama decoder stacks for CSM, built from the shared decoder blocks of `layers/decoder.py` (static KV
cache in batch slots, fused projections and varlen flash attention on CUDA): the same layers without
the per-head q/k RMSNorm, and RoPE with optional Llama-3 frequency scaling."""
from __future__ import annotations

from dataclasses import replace

import torch
from torch import nn

from ..layers.decoder import DecoderStack, KVCache, Step
from ..rope import llama3_scaled
from ..rope import rope_cos_sin_of as rope_cos_sin
from .config import LlamaShape, RopeConfig


class LlamaStack(DecoderStack):
    """`layers` + `norm` with official Llama parameter names (no `q_norm`/`k_norm`)."""

    def __init__(self, shape: LlamaShape) -> None:
        super().__init__(shape.num_hidden_layers, shape.hidden_size, shape.intermediate_size,
                         shape.num_attention_heads, shape.num_key_value_heads, shape.head_dim, shape.rms_norm_eps)
        self.shape = shape
        for layer in self.layers:  # Llama attention has no q/k norm: identities hold no parameters
            layer.self_attn.q_norm = nn.Identity()
            layer.self_attn.k_norm = nn.Identity()

    def allocate_cache(self, num_rows: int, max_seq_len: int, device: torch.device,
                       dtype: torch.dtype, pool_positions: int | None = None) -> KVCache:
        s = self.shape
        return KVCache.allocate(s.num_hidden_layers, num_rows, s.num_key_value_heads, max_seq_len, s.head_dim,
                                device, dtype, pool_positions)

    def step(self, rows: torch.Tensor, positions: torch.Tensor, cache: KVCache, dtype: torch.dtype) -> Step:
        """Where a forward pass reads and writes (rows [B], positions [B, T]), with this stack's RoPE."""
        s = self.shape
        step = Step.build(rows, positions, s.head_dim, s.rope.rope_theta, cache, dtype)
        if s.rope.rope_type == "default":
            return step
        cos, sin = rope_cos_sin(positions, inv_frequencies(s.head_dim, s.rope, positions.device), dtype)
        return replace(step, cos=cos, sin=sin)


def inv_frequencies(head_dim: int, rope: RopeConfig, device: torch.device) -> torch.Tensor:
    """[head_dim / 2] float32, with Llama-3 scaling: long wavelengths slowed by `factor`, short ones kept,
    the band between interpolated (transformers' `_compute_llama3_parameters`)."""
    exponent = torch.arange(0, head_dim, 2, dtype=torch.int64, device=device).float() / head_dim
    inv_freq = 1.0 / (rope.rope_theta ** exponent)
    if rope.rope_type == "default":
        return inv_freq
    return llama3_scaled(inv_freq, rope.factor, rope.low_freq_factor, rope.high_freq_factor,
                         rope.original_max_position_embeddings)

