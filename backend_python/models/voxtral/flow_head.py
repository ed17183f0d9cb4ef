"""Voxtral-TTS's per-frame head (`acoustic_transformer` in the checkpoint): the backbone's hidden state in, one
frame of codes out.

- The semantic code: `semantic_codebook_output`, a linear on the backbone's hidden state (not on the
  transformer's output), over the semantic codes after the two specials; EMPTY_AUDIO and the padding are never
  sampled, END_AUDIO ends the stream. The reference takes the argmax; here the request's sampling settings
  apply (temperature 0 is the reference).
- The 36 acoustic values: a flow from Gaussian noise (t = 0) to data (t = 1) with `n_decoding_steps` Euler steps
  at t = 0, 1/n, …, (n-1)/n. Each step's velocity is a bidirectional transformer (no RoPE, no mask) over three
  tokens, [input_projection(x_t), time_projection(emb(t)), llm_projection(h)], read off the first token by
  `acoustic_codebook_output`; classifier-free guidance runs the same step with h = 0 and mixes
  v = α v_cond + (1 - α) v_uncond. emb(t) is [cos(t f), sin(t f)] with f_j = 10000^(-j / (dim / 2)).
- FSQ: q = round((clamp(x, -1, 1) + 1) / 2 · (levels - 1)), an integer in [0, levels).

Module names are the checkpoint's (`layers.N.attention.wq`, `feed_forward.w1`, `attention_norm`, …) as
vllm-omni's `FlowMatchingAudioTransformer` names them. The whole head runs for a batch of rows inside the
frame's CUDA graph; its noise comes in as Exp(1) draws (the frame's noise buffer) and is made Gaussian here.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .config import END_AUDIO, EMPTY_AUDIO, NUM_AUDIO_SPECIALS, FlowHeadConfig


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class BidirectionalAttention(nn.Module):
    def __init__(self, c: FlowHeadConfig) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = c.n_heads, c.n_kv_heads, c.head_dim
        self.wq = nn.Linear(c.dim, c.n_heads * c.head_dim, bias=False)
        self.wk = nn.Linear(c.dim, c.n_kv_heads * c.head_dim, bias=False)
        self.wv = nn.Linear(c.dim, c.n_kv_heads * c.head_dim, bias=False)
        self.wo = nn.Linear(c.n_heads * c.head_dim, c.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        q = self.wq(x).view(batch, length, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(batch, length, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(batch, length, self.n_kv_heads, self.head_dim).transpose(1, 2)
        repeats = self.n_heads // self.n_kv_heads
        k, v = k.repeat_interleave(repeats, dim=1), v.repeat_interleave(repeats, dim=1)
        out = F.scaled_dot_product_attention(q, k, v)
        return self.wo(out.transpose(1, 2).reshape(batch, length, -1))


class Block(nn.Module):
    def __init__(self, c: FlowHeadConfig) -> None:
        super().__init__()
        self.attention = BidirectionalAttention(c)
        self.feed_forward = FeedForward(c.dim, c.hidden_dim)
        self.attention_norm = nn.RMSNorm(c.dim, eps=c.norm_eps)
        self.ffn_norm = nn.RMSNorm(c.dim, eps=c.norm_eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x))
        return h + self.feed_forward(self.ffn_norm(h))


class FlowHead(nn.Module):
    def __init__(self, c: FlowHeadConfig, semantic_head_size: int, semantic_codebook_size: int,
                 num_acoustic: int, acoustic_levels: int) -> None:
        super().__init__()
        self.config, self.num_acoustic, self.acoustic_levels = c, num_acoustic, acoustic_levels
        self.semantic_codebook_size = semantic_codebook_size
        self.input_projection = nn.Linear(num_acoustic, c.dim, bias=False)
        self.time_projection = nn.Linear(c.dim, c.dim, bias=False)
        self.llm_projection = nn.Linear(c.input_dim, c.dim, bias=False)
        self.semantic_codebook_output = nn.Linear(c.input_dim, semantic_head_size, bias=False)
        self.acoustic_codebook_output = nn.Linear(c.dim, num_acoustic, bias=False)
        self.layers = nn.ModuleDict({str(i): Block(c) for i in range(c.n_layers)})
        self.norm = nn.RMSNorm(c.dim, eps=c.norm_eps)
        self.reset_time_table()

    def reset_time_table(self) -> None:
        """emb(t) of each Euler step's t, [n_decoding_steps, dim], computed in float32 on the CPU (again after a
        load onto `meta`, where it was never computed); it moves and casts with the module."""
        c, half = self.config, self.config.dim // 2
        inverse_frequencies = torch.exp(-math.log(10000.0) * torch.arange(half, device="cpu") / half)
        angles = (torch.arange(c.n_decoding_steps, device="cpu") / c.n_decoding_steps)[:, None] * inverse_frequencies
        self.register_buffer("time_table", torch.cat((angles.cos(), angles.sin()), dim=-1), persistent=False)

    # ---- the semantic code -----------------------------------------------------------------------
    def semantic_logits(self, hidden: torch.Tensor, is_end_blocked: torch.Tensor) -> torch.Tensor:
        """hidden [B, D] -> [B, semantic_head_size] float32 logits in the checkpoint's id space, with EMPTY_AUDIO,
        the padding past the codes and, where `is_end_blocked` [B], END_AUDIO at -inf."""
        logits = self.semantic_codebook_output(hidden).float()
        ids = torch.arange(logits.shape[-1], device=logits.device)
        never = (ids == EMPTY_AUDIO) | (ids >= NUM_AUDIO_SPECIALS + self.semantic_codebook_size)
        blocked = never[None, :] | ((ids == END_AUDIO)[None, :] & is_end_blocked[:, None])
        return logits.masked_fill(blocked, float("-inf"))

    # ---- the acoustic values ---------------------------------------------------------------------
    def velocity(self, x: torch.Tensor, time_embedding: torch.Tensor, condition: torch.Tensor) -> torch.Tensor:
        """x [N, A], time_embedding [dim], condition [N, D] -> [N, A]."""
        tokens = torch.stack((self.input_projection(x.to(condition.dtype)),
                              self.time_projection(time_embedding).expand(x.shape[0], -1),
                              self.llm_projection(condition)), dim=1)
        for layer in self.layers.values():
            tokens = layer(tokens)
        return self.acoustic_codebook_output(self.norm(tokens)[:, 0])

    def acoustic_values(self, hidden: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """hidden [B, D], noise [B, A] standard Gaussian -> the flow's end point [B, A] (float32)."""
        c, batch = self.config, hidden.shape[0]
        x = noise.float() * c.noise_scale
        conditions = torch.cat((hidden, torch.zeros_like(hidden)))  # guided, then unconditional
        dt = 1.0 / c.n_decoding_steps
        for step in range(c.n_decoding_steps):
            v = self.velocity(torch.cat((x, x)), self.time_table[step].to(hidden.dtype), conditions).float()
            x = x + (c.cfg_alpha * v[:batch] + (1.0 - c.cfg_alpha) * v[batch:]) * dt
        return x

    def quantize(self, values: torch.Tensor) -> torch.Tensor:
        """FSQ: [B, A] float -> [B, A] int64 in [0, levels)."""
        return (((values.clamp(-1, 1) + 1) / 2) * (self.acoustic_levels - 1)).round().long()


def gaussian_from_exponential(draws: torch.Tensor) -> torch.Tensor:
    """Exp(1) draws -> standard Gaussian ones, one to one (u = 1 - e^-x is uniform; z = Φ⁻¹(u)); clamped away
    from u = 0 and 1, where Φ⁻¹ is infinite."""
    uniform = (-torch.expm1(-draws.float())).clamp(1e-7, 1 - 1e-7)
    return torch.special.ndtri(uniform)
