"""A diffusion transformer (DiT) that predicts a flow-matching velocity over mel frames: F5-TTS's DiT as
CosyVoice 3 ships it (cosyvoice/flow/DiT), shared by the flow-matching codecs (CosyVoice 3, FlashTTS).

Module names mirror the reference's, so its `decoder.estimator.*` keys load as they are. Quirks kept on
purpose, because trained weights depend on them:
- rotary position embedding is applied to the first `dim_head` channels of the concatenated heads, i.e.
  to head 0 only (x-transformers' partial rotary on the [B, N, heads * dim_head] projections), with
  x-transformers 2.x's interleaved pairs;
- the convolutional position embedding is causal (left-padded), two grouped convs of `conv_pos_kernel`;
- AdaLayerNormZero's final variant splits its modulation as (scale, shift), the block's as
  (shift, scale, gate) for attention then the feed-forward.

Tensors are [B, N, C] (frames, then channels) throughout. `mask` [B, N] bool marks real frames: padded
frames are never attended to and their outputs are zeroed, so right-padded rows decode as if alone
(everything else is per frame or causal).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

TIME_FREQ_DIM = 256  # sinusoidal features of the flow time before the time MLP
TIME_SCALE = 1000.0  # the flow time t in [0, 1] is scaled like a diffusion step index
NORM_EPS = 1e-6


@dataclass(frozen=True)
class DiTConfig:
    """The reference `DiT` constructor arguments (CosyVoice 3's cosyvoice3.yaml `estimator`)."""

    dim: int = 1024
    depth: int = 22
    heads: int = 16
    dim_head: int = 64
    ff_mult: int = 2
    mel_dim: int = 80  # the noisy input x, the audio condition and the output velocity
    mu_dim: int = 80  # the token condition
    spk_dim: int = 80  # the projected speaker embedding (0: none)
    conv_pos_kernel: int = 31
    conv_pos_groups: int = 16

    def __post_init__(self) -> None:
        if self.dim % self.conv_pos_groups or self.conv_pos_kernel % 2 == 0:
            raise ValueError(f"dim must split into conv_pos_groups and conv_pos_kernel must be odd: {self}")
        if self.dim_head % 2 or min(self.dim, self.depth, self.heads, self.dim_head, self.ff_mult) < 1:
            raise ValueError(f"DiT sizes must be >= 1 and dim_head even: {self}")

    def to_dict(self) -> dict:
        return asdict(self)


def timestep_features(t: torch.Tensor, dim: int = TIME_FREQ_DIM) -> torch.Tensor:
    """t: [B] -> [B, dim] (sin | cos) features, computed in float32 (the reference's SinusPositionEmbedding)."""
    half = dim // 2
    freqs = torch.exp(torch.arange(half, device=t.device, dtype=torch.float32) * -(math.log(10000) / (half - 1)))
    angles = TIME_SCALE * t.float()[:, None] * freqs[None]
    return torch.cat((angles.sin(), angles.cos()), dim=-1)


class TimestepEmbedding(nn.Module):
    def __init__(self, dim: int, freq_dim: int = TIME_FREQ_DIM) -> None:
        super().__init__()
        self.freq_dim = freq_dim
        self.time_mlp = nn.Sequential(nn.Linear(freq_dim, dim), nn.SiLU(), nn.Linear(dim, dim))

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        """t: [B] -> [B, dim]."""
        return self.time_mlp(timestep_features(t, self.freq_dim).to(self.time_mlp[0].weight.dtype))


def grouped_conv1d(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, groups: int) -> torch.Tensor:
    """`F.conv1d(x, weight, bias, groups=groups)` (stride 1, no padding) as one batched matmul over the groups:
    x [B, C, N + K - 1], weight [C_out, C / groups, K] -> [B, C_out, N]. On an H200 cuDNN runs CosyVoice 3's
    bf16 grouped position conv as one kernel per group, 16 a call and a fifth of a batch-1 window's GPU time
    (BENCHMARKS.md, "Flow-matching families"); this is four kernels."""
    batch, channels, _ = x.shape
    out_channels, group_channels, kernel = weight.shape
    out_per_group = out_channels // groups
    cols = x.unfold(2, kernel, 1)  # [B, C, N, K], a view
    frames = cols.shape[2]
    cols = cols.reshape(batch, groups, group_channels, frames, kernel).permute(1, 0, 3, 2, 4)
    cols = cols.reshape(groups, batch * frames, group_channels * kernel)  # the one copy of the input
    w = weight.reshape(groups, out_per_group, group_channels * kernel).transpose(1, 2)  # [G, C/G * K, C_out / G]
    if bias is None:
        out = torch.bmm(cols, w)
    else:
        out = torch.baddbmm(bias.reshape(groups, 1, out_per_group), cols, w)
    return out.reshape(groups, batch, frames, out_per_group).permute(1, 0, 3, 2).reshape(batch, out_channels, frames)


class CausalConvPositionEmbedding(nn.Module):
    """Two grouped convs, each left-padded by kernel - 1 (frame n sees frames <= n), with Mish. On CUDA the
    convs run as batched matmuls (`grouped_conv1d`); on the CPU, where the reference is checked, as convs."""

    def __init__(self, dim: int, kernel_size: int = 31, groups: int = 16) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.conv1 = nn.Sequential(nn.Conv1d(dim, dim, kernel_size, groups=groups), nn.Mish())
        self.conv2 = nn.Sequential(nn.Conv1d(dim, dim, kernel_size, groups=groups), nn.Mish())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [B, N, dim] -> [B, N, dim]."""
        x = self._conv(self.conv1, F.pad(x.transpose(1, 2), (self.kernel_size - 1, 0)))
        x = self._conv(self.conv2, F.pad(x, (self.kernel_size - 1, 0)))
        return x.transpose(1, 2)

    @staticmethod
    def _conv(block: nn.Sequential, x: torch.Tensor) -> torch.Tensor:
        conv, mish = block
        if x.device.type != "cuda":
            return mish(conv(x))
        return mish(grouped_conv1d(x, conv.weight, conv.bias, conv.groups))


class InputEmbedding(nn.Module):
    """[noisy mel | audio condition | token condition | speaker] -> dim, plus the causal conv position embedding."""

    def __init__(self, mel_dim: int, mu_dim: int, out_dim: int, spk_dim: int, conv_pos_kernel: int = 31,
                 conv_pos_groups: int = 16) -> None:
        super().__init__()
        self.proj = nn.Linear(mel_dim * 2 + mu_dim + spk_dim, out_dim)
        self.conv_pos_embed = CausalConvPositionEmbedding(out_dim, conv_pos_kernel, conv_pos_groups)

    def forward(self, x: torch.Tensor, cond: torch.Tensor, mu: torch.Tensor, spks: torch.Tensor | None) -> torch.Tensor:
        """x, cond: [B, N, mel_dim], mu: [B, N, mu_dim], spks: [B, spk_dim] or None -> [B, N, out_dim]."""
        parts = [x, cond, mu]
        if spks is not None:
            parts.append(spks[:, None].expand(-1, x.shape[1], -1))
        x = self.proj(torch.cat(parts, dim=-1))
        return self.conv_pos_embed(x) + x


def rotary_inv_freq(dim: int, base: float = 10000.0) -> torch.Tensor:
    """[dim / 2] float32 inverse frequencies."""
    return 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))


class RotaryEmbedding(nn.Module):
    """x-transformers 2.x rotary frequencies: interleaved pairs (f0, f0, f1, f1, ...)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.register_buffer("inv_freq", rotary_inv_freq(dim))  # persistent, as in the reference's state dict

    def forward(self, num_frames: int) -> tuple[torch.Tensor, torch.Tensor]:
        """-> (cos, sin) [N, dim] float32 for positions 0..N-1: computed once per DiT call and shared by every
        layer (per layer they were ~1,000 of a CosyVoice 3 window's 14,000 kernels)."""
        positions = torch.arange(num_frames, device=self.inv_freq.device, dtype=torch.float32)
        freqs = positions[:, None] * self.inv_freq.float()[None]
        freqs = torch.stack((freqs, freqs), dim=-1).flatten(-2)
        return freqs.cos(), freqs.sin()


def apply_rotary(x: torch.Tensor, freqs: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """x: [..., N, C], freqs: (cos, sin) [N, R] with R <= C: rotates the first R channels in interleaved pairs,
    in place (returns x). In float32 as the reference (x-transformers multiplies by float32 cos and sin), then
    back to x's dtype; the channels past R are never copied."""
    cos, sin = freqs
    rot = x[..., : cos.shape[-1]]
    pairs = rot.unflatten(-1, (-1, 2))
    rotated_half = torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)
    rot.copy_(rot * cos + rotated_half * sin)
    return x


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, dim_head: int) -> None:
        super().__init__()
        self.heads, self.dim_head = heads, dim_head
        inner = heads * dim_head
        self.to_q = nn.Linear(dim, inner)
        self.to_k = nn.Linear(dim, inner)
        self.to_v = nn.Linear(dim, inner)
        self.to_out = nn.ModuleList([nn.Linear(inner, dim)])  # the reference's [linear, dropout]

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None,
                freqs: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """x: [B, N, dim], mask: [B, N] bool (keys that exist), freqs: (cos, sin) [N, dim_head] -> [B, N, dim]."""
        q, k, v = apply_rotary(self.to_q(x), freqs), apply_rotary(self.to_k(x), freqs), self.to_v(x)
        q, k, v = (t.unflatten(-1, (self.heads, self.dim_head)).transpose(1, 2) for t in (q, k, v))
        attn_mask = None if mask is None else mask[:, None, None, :]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        out = self.to_out[0](out.transpose(1, 2).flatten(2))
        return out if mask is None else out.masked_fill(~mask[..., None], 0.0)


class AdaLayerNormZero(nn.Module):
    """LayerNorm modulated by the time embedding: shift/scale/gate for attention and the feed-forward."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.linear = nn.Linear(dim, dim * 6)
        self.norm = nn.LayerNorm(dim, elementwise_affine=False, eps=NORM_EPS)

    def forward(self, x: torch.Tensor, emb: torch.Tensor) -> tuple[torch.Tensor, ...]:
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = self.linear(F.silu(emb)).chunk(6, dim=1)
        x = self.norm(x) * (1 + scale_msa[:, None]) + shift_msa[:, None]
        return x, gate_msa, shift_mlp, scale_mlp, gate_mlp


class AdaLayerNormZeroFinal(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.linear = nn.Linear(dim, dim * 2)
        self.norm = nn.LayerNorm(dim, elementwise_affine=False, eps=NORM_EPS)

    def forward(self, x: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        scale, shift = self.linear(F.silu(emb)).chunk(2, dim=1)
        return self.norm(x) * (1 + scale)[:, None] + shift[:, None]


class FeedForward(nn.Module):
    def __init__(self, dim: int, mult: int) -> None:
        super().__init__()
        inner = dim * mult
        # indices as the reference's Sequential(Sequential(linear, gelu), dropout, linear)
        self.ff = nn.Sequential(nn.Sequential(nn.Linear(dim, inner), nn.GELU(approximate="tanh")), nn.Identity(),
                                nn.Linear(inner, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ff(x)


class DiTBlock(nn.Module):
    def __init__(self, dim: int, heads: int, dim_head: int, ff_mult: int) -> None:
        super().__init__()
        self.attn_norm = AdaLayerNormZero(dim)
        self.attn = Attention(dim, heads, dim_head)
        self.ff_norm = nn.LayerNorm(dim, elementwise_affine=False, eps=NORM_EPS)
        self.ff = FeedForward(dim, ff_mult)

    def forward(self, x: torch.Tensor, t: torch.Tensor, mask: torch.Tensor | None,
                freqs: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        norm, gate_msa, shift_mlp, scale_mlp, gate_mlp = self.attn_norm(x, t)
        x = x + gate_msa[:, None] * self.attn(norm, mask, freqs)
        norm = self.ff_norm(x) * (1 + scale_mlp[:, None]) + shift_mlp[:, None]
        return x + gate_mlp[:, None] * self.ff(norm)


def compile_blocks(blocks: nn.ModuleList) -> None:
    """Compile each DiT block with Inductor (dynamic shapes: every bucket's batch and length share the code;
    the blocks share it too, as instances of one class). Fuses the ~9 full-size elementwise passes of a block
    (modulation, gates, residuals, rotary) that run as separate kernels eagerly. Undo with `uncompile_blocks`."""
    for block in blocks:
        block.compile(dynamic=True, fullgraph=True)


def uncompile_blocks(blocks: nn.ModuleList) -> None:
    for block in blocks:
        block._compiled_call_impl = None  # what nn.Module.compile set: the plain forward again


class DiT(nn.Module):
    """The velocity estimator: v = DiT(x_t, mask, mu, t, spks, cond)."""

    def __init__(self, cfg: DiTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.time_embed = TimestepEmbedding(cfg.dim)
        self.input_embed = InputEmbedding(cfg.mel_dim, cfg.mu_dim, cfg.dim, cfg.spk_dim, cfg.conv_pos_kernel,
                                          cfg.conv_pos_groups)
        self.rotary_embed = RotaryEmbedding(cfg.dim_head)
        self.transformer_blocks = nn.ModuleList(
            [DiTBlock(cfg.dim, cfg.heads, cfg.dim_head, cfg.ff_mult) for _ in range(cfg.depth)])
        self.norm_out = AdaLayerNormZeroFinal(cfg.dim)
        self.proj_out = nn.Linear(cfg.dim, cfg.mel_dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, mu: torch.Tensor, t: torch.Tensor,
                spks: torch.Tensor | None, cond: torch.Tensor) -> torch.Tensor:
        """x, cond: [B, N, mel_dim], mask: [B, N] bool or None (all real), mu: [B, N, mu_dim], t: [B],
        spks: [B, spk_dim] -> velocity [B, N, mel_dim]."""
        emb = self.time_embed(t)
        h = self.input_embed(x, cond, mu, spks)
        freqs = self.rotary_embed(x.shape[1])
        for block in self.transformer_blocks:
            h = block(h, emb, mask, freqs)
        return self.proj_out(self.norm_out(h, emb))
