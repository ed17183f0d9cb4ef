"""Qwen3 decoder building blocks shared by the talker and the code predictor.

Attention reads and writes a static KV cache in batch slots (gpt-fast style): one write path,
`cache.k[layer][rows, :, positions] = k`, for prefill (B=1, T=prompt) and decode (B rows, T=1)
alike; each query attends to the keys of its own row at positions <= its own position.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class KVCache:
    """Static K/V memory: k, v: [layers, rows, kv_heads, max_seq_len, head_dim]."""

    k: torch.Tensor
    v: torch.Tensor

    @classmethod
    def allocate(cls, num_layers: int, num_rows: int, num_kv_heads: int, max_seq_len: int, head_dim: int,
                 device: torch.device, dtype: torch.dtype) -> "KVCache":
        shape = (num_layers, num_rows, num_kv_heads, max_seq_len, head_dim)
        # zeros, not empty: masked keys get weight 0, and 0 * NaN garbage would still be NaN
        return cls(torch.zeros(shape, device=device, dtype=dtype), torch.zeros(shape, device=device, dtype=dtype))

    @property
    def max_seq_len(self) -> int:
        return self.k.shape[3]


@dataclass
class Step:
    """Where a forward pass reads and writes: rows of the cache and absolute positions."""

    rows: torch.Tensor  # [B] int64, cache row of each batch row
    positions: torch.Tensor  # [B, T] int64, absolute position of each token
    cos: torch.Tensor  # [B, 1, T, head_dim]
    sin: torch.Tensor  # [B, 1, T, head_dim]
    mask: torch.Tensor  # [B, 1, T, max_seq_len] bool, True = attend

    @classmethod
    def build(cls, rows: torch.Tensor, positions: torch.Tensor, head_dim: int, rope_theta: float,
              max_seq_len: int, dtype: torch.dtype) -> "Step":
        cos, sin = rope_cos_sin(positions, head_dim, rope_theta, dtype)
        keys = torch.arange(max_seq_len, device=positions.device)
        mask = keys[None, None, None, :] <= positions[:, None, :, None]
        return cls(rows, positions, cos, sin, mask)

    def window(self, start: int, end: int) -> "Step":
        """The tokens start..end-1 of a step built over a whole (short) sequence."""
        return Step(self.rows, self.positions[:, start:end], self.cos[:, :, start:end], self.sin[:, :, start:end],
                    self.mask[:, :, start:end])


def rope_cos_sin(positions: torch.Tensor, head_dim: int, theta: float,
                 dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """positions: [B, T] -> cos, sin: [B, 1, T, head_dim] (fp32 math, like the reference).

    The talker's interleaved MRoPE takes each frequency from one of three position streams
    (temporal/height/width); for text-only prompts the three coincide, so it is ordinary RoPE.
    """
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=positions.device,
                                             dtype=torch.int64).float() / head_dim))
    freqs = positions[..., None].float() * inv_freq  # [B, T, head_dim/2]
    emb = torch.cat((freqs, freqs), dim=-1)[:, None]
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [B, heads, T, head_dim], rotate-half convention."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


class MLP(nn.Module):
    """SwiGLU feed-forward (`gate_proj`, `up_proj`, `down_proj`)."""

    def __init__(self, hidden_size: int, intermediate_size: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Attention(nn.Module):
    """GQA self-attention with per-head q/k RMSNorm before RoPE."""

    def __init__(self, hidden_size: int, num_heads: int, num_kv_heads: int, head_dim: int, eps: float) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.q_proj = nn.Linear(hidden_size, num_heads * head_dim, bias=False)
        self.k_proj = nn.Linear(hidden_size, num_kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(hidden_size, num_kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(num_heads * head_dim, hidden_size, bias=False)
        self.q_norm = RMSNorm(head_dim, eps)
        self.k_norm = RMSNorm(head_dim, eps)

    def forward(self, x: torch.Tensor, step: Step, k_cache: torch.Tensor, v_cache: torch.Tensor) -> torch.Tensor:
        """x: [B, T, hidden]; k_cache, v_cache: [rows, kv_heads, max_seq_len, head_dim] (written in place)."""
        b, t, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(b, t, self.num_heads, self.head_dim)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(b, t, self.num_kv_heads, self.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.num_kv_heads, self.head_dim)
        q, k = apply_rope(q, step.cos, step.sin), apply_rope(k, step.cos, step.sin)
        index = (step.rows[:, None], slice(None), step.positions)  # selects [B, T, kv_heads, head_dim]
        k_cache[index] = k.transpose(1, 2)
        v_cache[index] = v
        keys, values = k_cache[step.rows], v_cache[step.rows]  # [B, kv_heads, max_seq_len, head_dim]
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=step.mask, enable_gqa=True)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class DecoderLayer(nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int, num_heads: int, num_kv_heads: int,
                 head_dim: int, eps: float) -> None:
        super().__init__()
        self.self_attn = Attention(hidden_size, num_heads, num_kv_heads, head_dim, eps)
        self.mlp = MLP(hidden_size, intermediate_size)
        self.input_layernorm = RMSNorm(hidden_size, eps)
        self.post_attention_layernorm = RMSNorm(hidden_size, eps)

    def forward(self, x: torch.Tensor, step: Step, k_cache: torch.Tensor, v_cache: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), step, k_cache, v_cache)
        return x + self.mlp(self.post_attention_layernorm(x))


class DecoderStack(nn.Module):
    """`layers` + final `norm`; subclasses add their embeddings (names follow the official checkpoint)."""

    def __init__(self, num_layers: int, hidden_size: int, intermediate_size: int, num_heads: int,
                 num_kv_heads: int, head_dim: int, eps: float) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            DecoderLayer(hidden_size, intermediate_size, num_heads, num_kv_heads, head_dim, eps)
            for _ in range(num_layers))
        self.norm = RMSNorm(hidden_size, eps)

    def forward(self, x: torch.Tensor, step: Step, cache: KVCache) -> torch.Tensor:
        """x: [B, T, hidden] -> final-normed hidden states [B, T, hidden]."""
        for i, layer in enumerate(self.layers):
            x = layer(x, step, cache.k[i], cache.v[i])
        return self.norm(x)
