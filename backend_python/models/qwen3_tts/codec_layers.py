"""Building blocks of the Qwen3-TTS 12 Hz codec decoder.

Module and attribute names mirror the official checkpoint's `decoder.*` keys so
its state dict loads as is. Every block is causal in time: a sample (or frame)
depends only on inputs at or before it. `Qwen3TTSCodec.decode_windows` relies on
that to right-pad windows of different lengths into one batch.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from backend_python.models.kernels.snake import snake_beta

from ..layers.decoder import RMSNorm  # the LM's norm: same math on CPU, one fused kernel on CUDA
from .codec_config import Qwen3TTSCodecConfig


# ---------------------------------------------------------------- convolutions


class CausalConv1d(nn.Module):
    """Stride-1 conv padded on the left only: output t sees inputs <= t."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int,
                 dilation: int = 1, groups: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, dilation=dilation, groups=groups)
        self.left_pad = (kernel_size - 1) * dilation
        self.is_pointwise = kernel_size == 1 and groups == 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [B, C_in, T] -> [B, C_out, T]
        if self.is_pointwise:  # a matmul: oneDNN is ~20x slower on few-channel pointwise convs (CPU)
            return torch.matmul(self.conv.weight[:, :, 0], x) + self.conv.bias[:, None]
        return self.conv(F.pad(x, (self.left_pad, 0)))


class CausalTransConv1d(nn.Module):
    """Transposed conv upsampling by `stride`; the tail that would need future input is cut."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int) -> None:
        super().__init__()
        self.conv = nn.ConvTranspose1d(in_channels, out_channels, kernel_size, stride=stride)
        self.right_trim = kernel_size - stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [B, C_in, T] -> [B, C_out, T * stride]
        y = self.conv(x)
        return y[..., : y.shape[-1] - self.right_trim] if self.right_trim else y


class SnakeBeta(nn.Module):
    """x + sin^2(x * e^alpha) / e^beta, per channel (log-scale parameters)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(channels))
        self.beta = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [B, C, T]; one fused pass on CUDA (kernels/snake.py)
        return snake_beta(x, torch.exp(self.alpha), 1.0 / (torch.exp(self.beta) + 1e-9))


class ConvNeXtBlock(nn.Module):
    """Depthwise causal conv, LayerNorm, pointwise MLP, scaled residual."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dwconv = CausalConv1d(dim, dim, kernel_size=7, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(1e-6 * torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [B, C, T]
        h = self.norm(self.dwconv(x).transpose(1, 2))  # [B, T, C]
        h = self.gamma * self.pwconv2(self.act(self.pwconv1(h)))
        return x + h.transpose(1, 2)


class ResidualUnit(nn.Module):
    def __init__(self, dim: int, dilation: int) -> None:
        super().__init__()
        self.act1 = SnakeBeta(dim)
        self.conv1 = CausalConv1d(dim, dim, kernel_size=7, dilation=dilation)
        self.act2 = SnakeBeta(dim)
        self.conv2 = CausalConv1d(dim, dim, kernel_size=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv2(self.act2(self.conv1(self.act1(x))))


class UpsampleBlock(nn.Module):
    """Snake, transposed-conv upsampling (halving channels), three dilated residual units."""

    def __init__(self, in_dim: int, out_dim: int, rate: int) -> None:
        super().__init__()
        self.block = nn.ModuleList([SnakeBeta(in_dim), CausalTransConv1d(in_dim, out_dim, 2 * rate, rate)]
                                   + [ResidualUnit(out_dim, d) for d in (1, 3, 9)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.block:
            x = layer(x)
        return x


# ---------------------------------------------------------------- quantizer


class EuclideanCodebook(nn.Module):
    """EMA codebook stored as (running sum, usage count); the entry is their ratio."""

    def __init__(self, dim: int, codebook_size: int) -> None:
        super().__init__()
        self.cluster_usage = nn.Parameter(torch.ones(codebook_size))
        self.embedding_sum = nn.Parameter(torch.zeros(codebook_size, dim))

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        # codes: [B, T] -> [B, T, dim]
        table = self.embedding_sum / self.cluster_usage.clamp(min=1e-5)[:, None]
        return F.embedding(codes, table)


class VectorQuantization(nn.Module):
    def __init__(self, dim: int, codebook_size: int) -> None:
        super().__init__()
        self._codebook = EuclideanCodebook(dim, codebook_size)


class ResidualVectorQuantization(nn.Module):
    def __init__(self, dim: int, codebook_size: int, num_quantizers: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList([VectorQuantization(dim, codebook_size) for _ in range(num_quantizers)])


class ResidualVectorQuantizer(nn.Module):
    """A group of codebooks whose entries are summed, then projected up by a 1x1 conv.

    `input_proj` only serves the encoder; it is kept so checkpoints round-trip.
    """

    def __init__(self, dim: int, io_dim: int, codebook_size: int, num_quantizers: int) -> None:
        super().__init__()
        self.input_proj = nn.Conv1d(io_dim, dim, 1, bias=False)
        self.output_proj = nn.Conv1d(dim, io_dim, 1, bias=False)
        self.vq = ResidualVectorQuantization(dim, codebook_size, num_quantizers)

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        # codes: [B, T, K_group] -> [B, io_dim, T]
        summed = self.vq.layers[0]._codebook.decode(codes[..., 0])
        for k in range(1, codes.shape[-1]):
            summed = summed + self.vq.layers[k]._codebook.decode(codes[..., k])
        return self.output_proj(summed.transpose(1, 2))


class SplitResidualVectorQuantizer(nn.Module):
    """Codebook 0 (semantic) and codebooks 1.. (acoustic) with separate projections."""

    def __init__(self, cfg: Qwen3TTSCodecConfig) -> None:
        super().__init__()
        dim = cfg.codebook_dim // 2
        self.rvq_first = ResidualVectorQuantizer(dim, cfg.codebook_dim, cfg.codebook_size, 1)
        self.rvq_rest = ResidualVectorQuantizer(dim, cfg.codebook_dim, cfg.codebook_size, cfg.num_quantizers - 1)

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        # codes: [B, T, K] -> [B, codebook_dim, T]
        return self.rvq_first.decode(codes[..., :1]) + self.rvq_rest.decode(codes[..., 1:])


# ---------------------------------------------------------------- transformer


class LayerScale(nn.Module):
    def __init__(self, dim: int, initial_scale: float) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.full((dim,), initial_scale))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * x


def rotary_cos_sin(positions: torch.Tensor, head_dim: int, theta: float,
                   dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """positions: [T] int64 -> (cos, sin): [T, head_dim] in `dtype` (computed in fp32)."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64, device=positions.device).float() / head_dim
    inv_freq = 1.0 / (theta ** exponents)  # [head_dim / 2]
    freqs = positions.float()[:, None] * inv_freq[None, :]
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


class Attention(nn.Module):
    def __init__(self, cfg: Qwen3TTSCodecConfig) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = cfg.resolved_head_dim
        bias = cfg.attention_bias
        self.q_proj = nn.Linear(cfg.hidden_size, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(cfg.hidden_size, self.num_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(cfg.hidden_size, self.num_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, cfg.hidden_size, bias=bias)

    def _heads(self, x: torch.Tensor, num_heads: int) -> torch.Tensor:
        # [B, T, H * D] -> [B, H, T, D]
        return x.view(x.shape[0], x.shape[1], num_heads, self.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor],
                mask: torch.Tensor) -> torch.Tensor:
        # x: [B, T, hidden]; mask: [T, T] bool
        q = apply_rotary(self._heads(self.q_proj(x), self.num_heads), *rope)
        k = apply_rotary(self._heads(self.k_proj(x), self.num_kv_heads), *rope)
        v = self._heads(self.v_proj(x), self.num_kv_heads)
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
                mask: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn_layer_scale(self.self_attn(self.input_layernorm(x), rope, mask))
        return x + self.mlp_layer_scale(self.mlp(self.post_attention_layernorm(x)))


class SlidingWindowTransformer(nn.Module):
    """Causal transformer over frames; each frame sees itself and the `sliding_window - 1` before it."""

    def __init__(self, cfg: Qwen3TTSCodecConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.input_proj = nn.Linear(cfg.latent_dim, cfg.hidden_size)
        self.layers = nn.ModuleList([TransformerLayer(cfg) for _ in range(cfg.num_hidden_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.output_proj = nn.Linear(cfg.hidden_size, cfg.latent_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [B, T, latent] -> [B, T, latent]; positions restart at 0 for every call (window)
        h = self.input_proj(x)
        positions = torch.arange(x.shape[1], device=x.device)
        rope = rotary_cos_sin(positions, self.cfg.resolved_head_dim, self.cfg.rope_theta, h.dtype)
        mask = sliding_window_mask(x.shape[1], self.cfg.sliding_window, x.device)
        for layer in self.layers:
            h = layer(h, rope, mask)
        return self.output_proj(self.norm(h))


# ---------------------------------------------------------------- whole decoder


class CodecDecoder(nn.Module):
    """codes [B, T, K] -> waveform [B, T * samples_per_frame] (same dtype as the weights, unclamped)."""

    def __init__(self, cfg: Qwen3TTSCodecConfig) -> None:
        super().__init__()
        self.quantizer = SplitResidualVectorQuantizer(cfg)
        self.pre_conv = CausalConv1d(cfg.codebook_dim, cfg.latent_dim, kernel_size=3)
        self.pre_transformer = SlidingWindowTransformer(cfg)
        self.upsample = nn.ModuleList([
            nn.ModuleList([CausalTransConv1d(cfg.latent_dim, cfg.latent_dim, r, r), ConvNeXtBlock(cfg.latent_dim)])
            for r in cfg.upsampling_ratios])
        dims = [cfg.decoder_dim // 2**i for i in range(len(cfg.upsample_rates) + 1)]
        self.decoder = nn.ModuleList(
            [CausalConv1d(cfg.latent_dim, cfg.decoder_dim, 7)]
            + [UpsampleBlock(dims[i], dims[i + 1], r) for i, r in enumerate(cfg.upsample_rates)]
            + [SnakeBeta(dims[-1]), CausalConv1d(dims[-1], 1, 7)])

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        h = self.pre_conv(self.quantizer.decode(codes))  # [B, latent, T]
        h = self.pre_transformer(h.transpose(1, 2)).transpose(1, 2)  # [B, latent, T]
        for blocks in self.upsample:
            for block in blocks:
                h = block(h)  # [B, latent, T * prod(upsampling_ratios)]
        for block in self.decoder:
            h = block(h)  # ends at [B, 1, T * samples_per_frame]
        return h[:, 0]
