"""Llama decoder stacks for CSM, built from the Qwen3-TTS blocks (static KV cache in batch slots,
fused projections and varlen flash attention on CUDA): the same layers without the per-head q/k
RMSNorm, and RoPE with optional Llama-3 frequency scaling."""
from __future__ import annotations

import math
from dataclasses import replace

import torch
from torch import nn

from ..qwen3_tts.layers import DecoderStack, KVCache, Step
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
                       dtype: torch.dtype) -> KVCache:
        s = self.shape
        return KVCache.allocate(s.num_hidden_layers, num_rows, s.num_key_value_heads, max_seq_len, s.head_dim,
                                device, dtype)

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
    old_len = rope.original_max_position_embeddings
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > old_len / rope.low_freq_factor, inv_freq / rope.factor, inv_freq)
    smooth = (old_len / wavelen - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor)
    smoothed = (1 - smooth) * scaled / rope.factor + smooth * scaled
    is_medium = ~(wavelen < old_len / rope.high_freq_factor) * ~(wavelen > old_len / rope.low_freq_factor)
    return torch.where(is_medium, smoothed, scaled)


def rope_cos_sin(positions: torch.Tensor, inv_freq: torch.Tensor,
                 dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """positions [B, T] -> cos, sin [B, T, 1, head_dim], sin sign-folded as `qwen3_tts.layers.apply_rope` expects."""
    freqs = positions[..., None].float() * inv_freq  # [B, T, head_dim/2]
    emb = torch.cat((freqs, freqs), dim=-1)[:, :, None]
    sin = emb.sin()
    sin[..., : inv_freq.shape[0]] *= -1
    return emb.cos().to(dtype), sin.to(dtype)
