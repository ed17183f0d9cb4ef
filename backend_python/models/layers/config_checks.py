"""Checks a decoder stack's config runs on its own construction (no torch: configs are read without it)."""
from __future__ import annotations


def check_attention(num_heads: int, num_kv_heads: int, head_dim: int, rope: bool = True) -> None:
    """Grouped-query attention needs whole groups of query heads per KV head; RoPE needs an even head size."""
    if num_heads % num_kv_heads:
        raise ValueError(f"num_attention_heads {num_heads} not a multiple of num_key_value_heads {num_kv_heads}")
    if rope and head_dim % 2:
        raise ValueError(f"head_dim must be even for RoPE, got {head_dim}")
