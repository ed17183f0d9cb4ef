"""The Zonos transformer backbone (`backbone.*`, the reference's `TorchZonosBackbone` names) over the shared KV
cache (`layers/decoder.py`: one write path, masked SDPA or varlen flash attention per row).

Its layer differs from the shared Llama/Qwen block, so it has its own modules: pre-LayerNorm (with bias) blocks,
one fused q/k/v projection (`mixer.in_proj`), GQA, RoPE on *interleaved* pairs (dims 2i and 2i+1 rotate
together, base 10000, the whole head), and a gated MLP whose `fc1` gives [value, gate] with value * silu(gate).
"""
from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from ..layers.decoder import KVCache, Step, attend
from .config import ROPE_THETA, BackboneShape


def interleaved_cos_sin(positions: torch.Tensor, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """positions [B, T] -> cos, sin [B, T, 1, head_dim / 2] float32 (pair i turns at theta^(-2i/head_dim))."""
    inv_freq = 1.0 / (ROPE_THETA ** (torch.arange(0, head_dim, 2, device=positions.device).float() / head_dim))
    angles = positions[..., None].float() * inv_freq
    return angles.cos()[:, :, None], angles.sin()[:, :, None]


def rotate_interleaved(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, T, heads, head_dim]: pair (x0, x1) -> (x0 cos - x1 sin, x1 cos + x0 sin), in float32."""
    pairs = x.float().unflatten(-1, (-1, 2))
    x0, x1 = pairs[..., 0], pairs[..., 1]
    return torch.stack((x0 * cos - x1 * sin, x1 * cos + x0 * sin), dim=-1).flatten(-2).type_as(x)


class Attention(nn.Module):
    def __init__(self, shape: BackboneShape) -> None:
        super().__init__()
        self.num_heads, self.num_heads_kv, self.head_dim = shape.num_heads, shape.num_heads_kv, shape.head_dim
        self.in_proj = nn.Linear(shape.d_model, (shape.num_heads + 2 * shape.num_heads_kv) * shape.head_dim,
                                 bias=False)
        self.out_proj = nn.Linear(shape.num_heads * shape.head_dim, shape.d_model, bias=False)

    def forward(self, x: torch.Tensor, step: Step, k_cache: torch.Tensor, v_cache: torch.Tensor) -> torch.Tensor:
        """x [B, T, d_model]; step.cos/sin are the interleaved tables; k_cache, v_cache [pool, kv_heads, head_dim]."""
        b, t, _ = x.shape
        q_size, kv_size = self.num_heads * self.head_dim, self.num_heads_kv * self.head_dim
        q, k, v = self.in_proj(x).split((q_size, kv_size, kv_size), dim=-1)
        q = rotate_interleaved(q.view(b, t, self.num_heads, self.head_dim), step.cos, step.sin)
        k = rotate_interleaved(k.view(b, t, self.num_heads_kv, self.head_dim), step.cos, step.sin)
        k_cache[step.write_index] = k
        v_cache[step.write_index] = v.view(b, t, self.num_heads_kv, self.head_dim)
        return self.out_proj(attend(q, k_cache, v_cache, step).reshape(b, t, q_size))


class FeedForward(nn.Module):
    def __init__(self, shape: BackboneShape) -> None:
        super().__init__()
        self.fc1 = nn.Linear(shape.d_model, 2 * shape.attn_mlp_d_intermediate, bias=False)
        self.fc2 = nn.Linear(shape.attn_mlp_d_intermediate, shape.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        value, gate = self.fc1(x).chunk(2, dim=-1)
        return self.fc2(value * F.silu(gate))


class TransformerBlock(nn.Module):
    def __init__(self, shape: BackboneShape) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(shape.d_model, eps=shape.norm_epsilon)
        self.mixer = Attention(shape)
        self.norm2 = nn.LayerNorm(shape.d_model, eps=shape.norm_epsilon)
        self.mlp = FeedForward(shape)

    def forward(self, x: torch.Tensor, step: Step, k_cache: torch.Tensor, v_cache: torch.Tensor) -> torch.Tensor:
        x = x + self.mixer(self.norm(x), step, k_cache, v_cache)
        return x + self.mlp(self.norm2(x))


class ZonosBackbone(nn.Module):
    """`layers` + `norm_f`."""

    def __init__(self, shape: BackboneShape) -> None:
        super().__init__()
        self.shape = shape
        self.layers = nn.ModuleList(TransformerBlock(shape) for _ in range(shape.n_layer))
        self.norm_f = nn.LayerNorm(shape.d_model, eps=shape.norm_epsilon)

    def allocate_cache(self, num_rows: int, max_seq_len: int, device: torch.device, dtype: torch.dtype,
                       pool_positions: int | None = None) -> KVCache:
        s = self.shape
        return KVCache.allocate(s.n_layer, num_rows, s.num_heads_kv, max_seq_len, s.head_dim, device, dtype,
                                pool_positions)

    def forward(self, x: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """x [B, T, d_model], rows [B] (cache rows), positions [B, T] -> normed hidden states [B, T, d_model]."""
        step = Step.build(rows, positions, self.shape.head_dim, ROPE_THETA, cache, x.dtype)
        cos, sin = interleaved_cos_sin(positions, self.shape.head_dim)
        step = dataclasses.replace(step, cos=cos, sin=sin)
        for i, layer in enumerate(self.layers):
            x = layer(x, step, cache.k[i], cache.v[i])
        return self.norm_f(x)
