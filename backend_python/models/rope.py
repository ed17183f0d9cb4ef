"""RoPE shared by the families' decoder stacks and the fused kernels' references: the tables and the rotation
(rotate-half convention)."""
from __future__ import annotations

import math

import torch


def rope_cos_sin_of(positions: torch.Tensor, inv_freq: torch.Tensor,
                    dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """positions: [B, T], inv_freq: [head_dim/2] float32 -> cos, sin: [B, T, 1, head_dim] (fp32 math).
    sin's first half is negated so that rotate-half is a plain `roll` (exact: only signs move)."""
    freqs = positions[..., None].float() * inv_freq  # [B, T, head_dim/2]
    emb = torch.cat((freqs, freqs), dim=-1)[:, :, None]
    sin = emb.sin()
    sin[..., : inv_freq.shape[0]] *= -1
    return emb.cos().to(dtype), sin.to(dtype)


def llama3_scaled(inv_freq: torch.Tensor, factor: float, low_freq_factor: float, high_freq_factor: float,
                  original_max_position_embeddings: int) -> torch.Tensor:
    """inv_freq: [head_dim/2] float32 -> Llama-3 scaled frequencies: long wavelengths slowed by `factor`,
    short ones kept, the band between interpolated (transformers' `_compute_llama3_parameters`)."""
    old_len = original_max_position_embeddings
    wavelen = 2 * math.pi / inv_freq
    low_wavelen, high_wavelen = old_len / low_freq_factor, old_len / high_freq_factor
    scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(is_medium, smoothed, scaled)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [B, T, heads, head_dim], rotate-half convention: x*cos + cat(-x2, x1)*sin (the tables' sin has its
    first half negated, so the rotation is a `roll`)."""
    return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * sin
