"""DualCodec's decoder (the 12.5 Hz `12hz_v1`): TontaubeV1's codes -> 24 kHz mono audio.

As the reference's `DualCodec.decode_from_codes(semantic [B, 1, T], acoustic [B, n, T])` chains it:

- the semantic code -> `semantic_vq.from_codes` (the codebook row through its `out_proj`, a weight-normed 1x1 conv)
  -> `convnext_decoder` (causal ConvNeXt blocks, then a weight-normed 1x1 conv to the 1,024-channel latent);
- the acoustic codes -> `dac.quantizer.from_codes`: each level's codebook row through its own `out_proj`, summed
  over the levels given. The official model has 7 acoustic levels; TontaubeV1 gives the first 3, and the
  reference then sums those 3 only (the levels not given add nothing), so we hold only the levels we use;
- the two latents summed -> `dac.decoder`: DAC's decoder (a 7-tap conv, one upsampling block a rate: Snake,
  transposed conv of kernel 2*rate, stride rate, padding ceil(rate/2), then three residual units with dilations 1,
  3, 9; then Snake, a 7-tap conv to one channel, tanh). Its convs are not causal.

Lengths: a transposed conv turns L frames into L * rate - (rate % 2) (its padding takes one sample more than its
kernel adds when the rate is odd), and nothing is trimmed or padded after. The official rates (2, 8, 6, 5, 4) turn
T frames into 1920 * T - 4 samples (the 5 takes one, which the 4 makes four); `output_length` computes it.

Parameters carry the reference's state-dict names, so the decode side of the official
`dualcodec_12hz_16384_4096.safetensors` loads strictly after `decoder_state` drops the rest. Weight norm is kept, not
folded: each weight-normed conv holds `weight_g` and `weight_v` (as `torch.nn.utils.weight_norm` leaves them, the
names the checkpoint stores) and computes its weight each call with the same `torch._weight_norm`.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import torch
from torch import nn

LATENT_DIM = 1024  # the DAC latent: the reference's convnext_decoder always ends at 1024 channels
CONVNEXT_INTERMEDIATE = 2048  # the reference's ConvNeXt blocks' fixed inner width
RESIDUAL_DILATIONS = (1, 3, 9)


@dataclass(frozen=True)
class DualCodecConfig:
    """The decoder's shape, in the reference `DualCodec`'s argument names (the latent is always LATENT_DIM)."""

    decoder_dim: int = 1536
    decoder_rates: tuple[int, ...] = (2, 8, 6, 5, 4)
    convnext_dim: int = 768
    convnext_layers: int = 4
    semantic_codebook_size: int = 16384
    semantic_codebook_dim: int = 8
    codebook_size: int = 4096
    codebook_dim: int = 8
    n_acoustic: int = 3  # acoustic RVQ levels decoded (the reference's n_codebooks is 7; TontaubeV1 uses 3)
    is_causal: bool = True  # the ConvNeXt blocks' depthwise conv sees only the past
    sample_rate: int = 24000

    def __post_init__(self) -> None:
        if self.decoder_dim >> len(self.decoder_rates) < 1:
            raise ValueError(f"decoder_dim {self.decoder_dim} halves to 0 over {len(self.decoder_rates)} rates")

    @property
    def hop_length(self) -> int:
        return math.prod(self.decoder_rates)


def full_config() -> DualCodecConfig:
    """The official `12hz_v1` (conf/model/dualcodec_12hz_16384_4096_8vq.yaml), decoding 3 acoustic levels."""
    return DualCodecConfig()


def tiny_config() -> DualCodecConfig:
    """Small widths for tests, at the same 1920-sample hop (an odd rate among them, as the official 5)."""
    return DualCodecConfig(decoder_dim=8, decoder_rates=(8, 15, 16), convnext_dim=4, convnext_layers=1,
                           semantic_codebook_size=32, semantic_codebook_dim=3, codebook_size=16, codebook_dim=2)


def lookahead_reach_frames(config: DualCodecConfig) -> int:
    """Frames after its own that an output frame of DAC's decoder reads (its convolutions are centred; the ConvNeXt
    stack in front is causal): 9 for `tiny_config`, 27 for the official shape (autograd: tests). Index arithmetic
    from a frame's last sample back: a 7-tap conv reads 3 samples ahead, a block's residual units 3 · (1 + 3 + 9),
    its transposed conv (stride r, padding ceil(r / 2)) makes output m from inputs up to floor((m + pad) / r)."""
    frame = 64  # any frame: the stack repeats every frame
    index = (frame + 1) * config.hop_length - 1 + 3  # the frame's last sample, through the last 7-tap conv
    for rate in reversed(config.decoder_rates):
        index = (index + 3 * sum(RESIDUAL_DILATIONS) + math.ceil(rate / 2)) // rate
    return index + 3 - frame  # the first 7-tap conv


def output_length(config: DualCodecConfig, frames: int) -> int:
    """The samples `frames` frames decode to (each transposed conv: L -> L * rate - rate % 2)."""
    length = frames
    for rate in config.decoder_rates:
        length = length * rate - rate % 2
    return length


_DECODE_SIDE = re.compile(r"semantic_vq\.quantizers\.0\.(codebook|out_proj)\.|convnext_decoder\.|dac\.decoder\."
                          r"|dac\.quantizer\.quantizers\.(\d+)\.(codebook|out_proj)\.")


def decoder_state(state_dict: dict[str, torch.Tensor], n_acoustic: int = 3) -> dict[str, torch.Tensor]:
    """The reference `DualCodec` state dict's decode side, which `DualCodecDecoder` holds under the same names.

    Dropped: the encoders (`dac.encoder`, `convnext_encoder`), the quantizers' `in_proj`s (they serve encoding
    only) and the acoustic levels from `n_acoustic` on."""
    kept = {}
    for name, tensor in state_dict.items():
        match = _DECODE_SIDE.match(name)
        if match and (match.group(2) is None or int(match.group(2)) < n_acoustic):
            kept[name] = tensor
    return kept


class WNConv1d(nn.Module):
    """A weight-normed conv (transposed if `transpose`) as `torch.nn.utils.weight_norm(dim=0)` leaves one: `bias`,
    `weight_g` (the norm of each slice along dim 0), `weight_v` (the direction)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, padding: int = 0,
                 dilation: int = 1, transpose: bool = False) -> None:
        super().__init__()
        self.stride, self.padding, self.dilation, self.transpose = stride, padding, dilation, transpose
        shape = (in_channels, out_channels, kernel_size) if transpose else (out_channels, in_channels, kernel_size)
        self.bias = nn.Parameter(torch.zeros(out_channels))
        self.weight_g = nn.Parameter(torch.empty(shape[0], 1, 1))
        self.weight_v = nn.Parameter(torch.empty(shape))
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """DAC's start: weights N(0, 0.02) (truncated), so g is their norm."""
        nn.init.trunc_normal_(self.weight_v, std=0.02)
        self.weight_g.copy_(torch.norm_except_dim(self.weight_v, 2, 0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = torch._weight_norm(self.weight_v, self.weight_g, 0)
        if self.transpose:
            return nn.functional.conv_transpose1d(x, weight, self.bias, self.stride, self.padding)
        return nn.functional.conv1d(x, weight, self.bias, self.stride, self.padding, self.dilation)


class Snake1d(nn.Module):
    """x + sin(alpha * x)^2 / (alpha + 1e-9), one alpha a channel."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(1, channels, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + (self.alpha + 1e-9).reciprocal() * torch.sin(self.alpha * x).pow(2)


class ResidualUnit(nn.Module):
    """x + (Snake -> 7-tap dilated conv -> Snake -> 1x1 conv)(x); the padding keeps the length."""

    def __init__(self, dim: int, dilation: int) -> None:
        super().__init__()
        self.block = nn.Sequential(Snake1d(dim), WNConv1d(dim, dim, 7, dilation=dilation, padding=3 * dilation),
                                   Snake1d(dim), WNConv1d(dim, dim, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.block(x)


class DecoderBlock(nn.Module):
    """Snake -> transposed conv (x rate in time, channels halved) -> the three residual units."""

    def __init__(self, in_dim: int, out_dim: int, rate: int) -> None:
        super().__init__()
        up = WNConv1d(in_dim, out_dim, 2 * rate, stride=rate, padding=math.ceil(rate / 2), transpose=True)
        self.block = nn.Sequential(Snake1d(in_dim), up, *(ResidualUnit(out_dim, d) for d in RESIDUAL_DILATIONS))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)


class Decoder(nn.Module):
    """`dac.decoder`: latent [B, 1024, T] -> audio [B, 1, output_length(T)] in [-1, 1]."""

    def __init__(self, c: DualCodecConfig) -> None:
        super().__init__()
        dims = [c.decoder_dim >> i for i in range(len(c.decoder_rates) + 1)]
        layers = [WNConv1d(LATENT_DIM, c.decoder_dim, 7, padding=3)]
        layers += [DecoderBlock(dims[i], dims[i + 1], rate) for i, rate in enumerate(c.decoder_rates)]
        layers += [Snake1d(dims[-1]), WNConv1d(dims[-1], 1, 7, padding=3), nn.Tanh()]
        self.model = nn.Sequential(*layers)

    def forward(self, latent: torch.Tensor) -> torch.Tensor:
        return self.model(latent)


class ConvNeXtBlock(nn.Module):
    """x + pwconv2(GELU(pwconv1(LayerNorm(dwconv(x))))): a 7-tap depthwise conv (causal: 6 past samples padded
    on the left), the rest per frame (no layer scale: the reference builds none)."""

    def __init__(self, dim: int, causal: bool) -> None:
        super().__init__()
        self.causal = causal
        self.dwconv = nn.Conv1d(dim, dim, kernel_size=7, padding=0 if causal else 3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, CONVNEXT_INTERMEDIATE)
        self.pwconv2 = nn.Linear(CONVNEXT_INTERMEDIATE, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.dwconv(nn.functional.pad(x, (6, 0)) if self.causal else x).transpose(1, 2)
        h = self.pwconv2(nn.functional.gelu(self.pwconv1(self.norm(h))))
        return x + h.transpose(1, 2)


class VectorQuantize(nn.Module):
    """One RVQ level's decode side: `codebook` [codes, codebook_dim] and `out_proj` (1x1 conv to `dim`)."""

    def __init__(self, dim: int, codebook_size: int, codebook_dim: int) -> None:
        super().__init__()
        self.codebook = nn.Embedding(codebook_size, codebook_dim)
        self.out_proj = WNConv1d(codebook_dim, dim, 1)

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, T] -> [B, dim, T]."""
        return self.out_proj(self.codebook(codes).transpose(1, 2))


class ResidualVectorQuantize(nn.Module):
    """`quantizers.*`: the levels' vectors summed (`from_codes`)."""

    def __init__(self, dim: int, levels: int, codebook_size: int, codebook_dim: int) -> None:
        super().__init__()
        self.quantizers = nn.ModuleList(VectorQuantize(dim, codebook_size, codebook_dim) for _ in range(levels))

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, n, T] (n up to the levels held; the first n are used) -> [B, dim, T]."""
        if not 0 < codes.shape[1] <= len(self.quantizers):
            raise ValueError(f"codes must have 1..{len(self.quantizers)} levels, got {codes.shape[1]}")
        return sum(self.quantizers[i](codes[:, i]) for i in range(codes.shape[1]))


class DualCodecDecoder(nn.Module):
    """The decode side of the reference `DualCodec`, under its names (`semantic_vq`, `convnext_decoder`,
    `dac.quantizer`, `dac.decoder`)."""

    def __init__(self, config: DualCodecConfig) -> None:
        super().__init__()
        c = self.config = config
        self.semantic_vq = ResidualVectorQuantize(c.convnext_dim, 1, c.semantic_codebook_size, c.semantic_codebook_dim)
        self.convnext_decoder = nn.Sequential(*(ConvNeXtBlock(c.convnext_dim, c.is_causal)
                                                for _ in range(c.convnext_layers)),
                                              WNConv1d(c.convnext_dim, LATENT_DIM, 1))
        self.dac = nn.Module()
        self.dac.quantizer = ResidualVectorQuantize(LATENT_DIM, c.n_acoustic, c.codebook_size, c.codebook_dim)
        self.dac.decoder = Decoder(c)

    def latent(self, semantic: torch.Tensor, acoustic: torch.Tensor) -> torch.Tensor:
        """semantic [B, T], acoustic [B, n, T] -> the DAC latent [B, 1024, T]."""
        return self.convnext_decoder(self.semantic_vq(semantic[:, None])) + self.dac.quantizer(acoustic)

    @torch.inference_mode()
    def decode(self, semantic: torch.Tensor, acoustic: torch.Tensor) -> torch.Tensor:
        """semantic [B, T] (codes < 16384), acoustic [B, 3, T] (codes < 4096) -> audio [B, output_length(T)]
        float32 in [-1, 1]."""
        if semantic.dim() != 2 or acoustic.dim() != 3 or acoustic.shape[::2] != semantic.shape:
            raise ValueError(f"want semantic [B, T] and acoustic [B, n, T], got {tuple(semantic.shape)} and "
                             f"{tuple(acoustic.shape)}")
        return self.dac.decoder(self.latent(semantic, acoustic))[:, 0].float()
