"""The Qwen3-TTS codec's causal sliding-window transformer, over whole windows or a stream.

Each frame attends to itself and the `sliding_window - 1` frames before it. Over a window, positions
start at 0 and a [T, T] mask bounds the attention. Over a stream (a `StreamCarry`), each attention
layer keeps the rotated keys and the values of its last `sliding_window - 1` frames; positions
continue from the row's state, and a per-row mask hides cache entries before the stream's start.
RoPE makes the scores depend only on relative positions, so both equal a full decode up to rounding.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..codec_stream import StreamCarry
from ..layers.decoder import RMSNorm  # the LM's norm: same math on CPU, one fused kernel on CUDA
from .codec_config import Qwen3TTSCodecConfig


class LayerScale(nn.Module):
    def __init__(self, dim: int, initial_scale: float) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.full((dim,), initial_scale))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * x


def rotary_cos_sin(positions: torch.Tensor, head_dim: int, theta: float,
                   dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """positions: [..., T] int64 -> (cos, sin): [..., T, head_dim] in `dtype` (computed in fp32)."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64, device=positions.device).float() / head_dim
    inv_freq = 1.0 / (theta ** exponents)  # [head_dim / 2]
    freqs = positions.float()[..., None] * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x: [B, H, T, D]; rotate-half convention (first half pairs with second half)
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def sliding_window_mask(num_frames: int, window: int, device: torch.device) -> torch.Tensor:
    """[T, T] bool, True where query q may attend key k: q - window < k <= q."""
    q = torch.arange(num_frames, device=device)[:, None]
    k = torch.arange(num_frames, device=device)[None, :]
    return (k <= q) & (k > q - window)


def stream_window_mask(position: torch.Tensor, num_frames: int, window: int) -> torch.Tensor:
    """[B, 1, T, window - 1 + T] bool over (cached keys, new keys) of rows at `position` [B].

    A key at absolute frame k is visible to the query at frame q when 0 <= k, q - window < k <= q:
    cache entries from before the stream's first frame hold zeros and stay hidden.
    """
    device = position.device
    keys = position[:, None, None] + torch.arange(1 - window, num_frames, device=device)[None, None, :]
    queries = position[:, None, None] + torch.arange(num_frames, device=device)[None, :, None]
    return ((keys >= 0) & (keys <= queries) & (keys > queries - window))[:, None]


class Attention(nn.Module):
    takes_carry = True

    def __init__(self, cfg: Qwen3TTSCodecConfig) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = cfg.resolved_head_dim
        self.cache_frames = cfg.sliding_window - 1
        self.stream_key = ""  # set by the decoder: this layer's name in a stream state
        bias = cfg.attention_bias
        self.q_proj = nn.Linear(cfg.hidden_size, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(cfg.hidden_size, self.num_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(cfg.hidden_size, self.num_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, cfg.hidden_size, bias=bias)

    def tail_shapes(self) -> dict[str, tuple[int, ...]]:
        """Per-row stream state: rotated keys and values of the last `sliding_window - 1` frames."""
        shape = (self.num_kv_heads, self.cache_frames, self.head_dim)
        return {f"{self.stream_key}.key": shape, f"{self.stream_key}.value": shape}

    def _heads(self, x: torch.Tensor, num_heads: int) -> torch.Tensor:
        # [B, T, H * D] -> [B, H, T, D]
        return x.view(x.shape[0], x.shape[1], num_heads, self.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor],
                mask: torch.Tensor, carry: StreamCarry | None = None) -> torch.Tensor:
        # x: [B, T, hidden]; mask: [T, T] bool, or [B, 1, T, cache_frames + T] with a carry
        q = apply_rotary(self._heads(self.q_proj(x), self.num_heads), *rope)
        k = apply_rotary(self._heads(self.k_proj(x), self.num_kv_heads), *rope)
        v = self._heads(self.v_proj(x), self.num_kv_heads)
        if carry is not None:  # the cached window in front: [B, H_kv, cache_frames + T, D]
            k = carry.extend(f"{self.stream_key}.key", k, dim=2)
            v = carry.extend(f"{self.stream_key}.value", v, dim=2)
        repeat = self.num_heads // self.num_kv_heads
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # [B, H, T, D]
        return self.o_proj(out.transpose(1, 2).reshape(x.shape[0], x.shape[1], -1))


class Mlp(nn.Module):
    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class TransformerLayer(nn.Module):
    def __init__(self, cfg: Qwen3TTSCodecConfig) -> None:
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = Mlp(cfg.hidden_size, cfg.intermediate_size)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn_layer_scale = LayerScale(cfg.hidden_size, cfg.layer_scale_initial_scale)
        self.mlp_layer_scale = LayerScale(cfg.hidden_size, cfg.layer_scale_initial_scale)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor],
                mask: torch.Tensor, carry: StreamCarry | None = None) -> torch.Tensor:
        x = x + self.self_attn_layer_scale(self.self_attn(self.input_layernorm(x), rope, mask, carry))
        return x + self.mlp_layer_scale(self.mlp(self.post_attention_layernorm(x)))


class SlidingWindowTransformer(nn.Module):
    """Causal transformer over frames; each frame sees itself and the `sliding_window - 1` before it."""

    takes_carry = True

    def __init__(self, cfg: Qwen3TTSCodecConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.input_proj = nn.Linear(cfg.latent_dim, cfg.hidden_size)
        self.layers = nn.ModuleList([TransformerLayer(cfg) for _ in range(cfg.num_hidden_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.output_proj = nn.Linear(cfg.hidden_size, cfg.latent_dim)

    def forward(self, x: torch.Tensor, carry: StreamCarry | None = None) -> torch.Tensor:
        # x: [B, T, latent] -> [B, T, latent]
        h = self.input_proj(x)
        rope, mask = self._rope_and_mask(x.shape[1], h, carry)
        for layer in self.layers:
            h = layer(h, rope, mask, carry)
        return self.output_proj(self.norm(h))

    def _rope_and_mask(self, num_frames: int, h: torch.Tensor, carry: StreamCarry | None):
        """A window's positions restart at 0; a stream's continue from each row's state."""
        cfg, steps = self.cfg, torch.arange(num_frames, device=h.device)
        if carry is None:
            rope = rotary_cos_sin(steps, cfg.resolved_head_dim, cfg.rope_theta, h.dtype)
            return rope, sliding_window_mask(num_frames, cfg.sliding_window, h.device)
        cos, sin = rotary_cos_sin(carry.position[:, None] + steps, cfg.resolved_head_dim, cfg.rope_theta, h.dtype)
        return (cos[:, None], sin[:, None]), stream_window_mask(carry.position, num_frames, cfg.sliding_window)
