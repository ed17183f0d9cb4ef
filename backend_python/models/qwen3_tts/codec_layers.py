"""Building blocks of the Qwen3-TTS 12 Hz codec decoder.

Module and attribute names mirror the official checkpoint's `decoder.*` keys so
its state dict loads as is. Every block is causal in time: a sample (or frame)
depends only on inputs at or before it. `Qwen3TTSCodec.decode_windows` relies on
that to right-pad windows of different lengths into one batch, and the streaming
decode on it to carry each layer's left tail from one call to the next: a block
with `takes_carry` accepts a `StreamCarry`, and one with `tail_shapes` keeps state.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from backend_python.models.kernels.snake import runs_kernel as runs_snake_kernel, snake_beta_fused, snake_beta_log

from ..codec_stream import POSITION, CodecStreamState, StreamCarry
from .codec_config import Qwen3TTSCodecConfig
from .codec_transformer import SlidingWindowTransformer


# ---------------------------------------------------------------- convolutions

# A streaming conv pads its input itself where the input is at least this many times its carried tail (below, the
# outputs the padding wastes, `left_pad` of them, cost more than the copy of [tail, x] they save)
PADDED_STREAM_MIN_RATIO = 8


class CausalConv1d(nn.Module):
    """Stride-1 conv padded on the left only: output t sees inputs <= t.

    Streaming, the zero padding is replaced by the last `left_pad` input samples of the previous call.
    """

    takes_carry = True

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int,
                 dilation: int = 1, groups: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, dilation=dilation, groups=groups)
        self.left_pad = (kernel_size - 1) * dilation
        self.is_pointwise = kernel_size == 1 and groups == 1
        self.stream_key = ""  # set by the decoder: this layer's name in a stream state

    def tail_shapes(self) -> dict[str, tuple[int, ...]]:
        return {self.stream_key: (self.conv.in_channels, self.left_pad)} if self.left_pad else {}

    def forward(self, x: torch.Tensor, carry: StreamCarry | None = None, with_bias: bool = True) -> torch.Tensor:
        # x: [B, C_in, T] -> [B, C_out, T]; with_bias False: the bias is left out (an activation behind adds it)
        bias = self.conv.bias if with_bias else None
        if self.is_pointwise:  # a matmul: oneDNN is ~20x slower on few-channel pointwise convs (CPU)
            y = torch.matmul(self.conv.weight[:, :, 0], x)
            return y if bias is None else y + bias[:, None]
        if carry is not None and self.left_pad:
            if x.shape[-1] < PADDED_STREAM_MIN_RATIO * self.left_pad:  # a short input: [tail, x] costs little
                return self._conv(carry.extend(self.stream_key, x), bias)
            return self._stream_padded(x, carry, bias)
        return self._conv(F.pad(x, (self.left_pad, 0)), bias)

    def _conv(self, x: torch.Tensor, bias: torch.Tensor | None, padding: int = 0) -> torch.Tensor:
        conv = self.conv
        return F.conv1d(x, conv.weight, bias, conv.stride, padding, conv.dilation, conv.groups)

    def _stream_padded(self, x: torch.Tensor, carry: StreamCarry, bias: torch.Tensor | None) -> torch.Tensor:
        """The streaming conv without a copy of x: the convolution pads x with zeros itself (both sides: outputs t <
        T see inputs <= t), and the first `left_pad` outputs, the only ones that read the carried tail, are computed
        again from [tail, x[:left_pad]] and written over. Returns a view of the first T outputs. At the decoder's
        waveform rate, x is tens of MB a call, and [tail, x] was a copy of all of it per layer."""
        pad = self.left_pad
        y = self._conv(x, bias, padding=pad)  # [B, C_out, T + pad]
        y[..., :pad] = self._conv(torch.cat((carry.state[self.stream_key], x[..., :pad]), dim=-1), bias)
        carry.keep_tail(self.stream_key, x)
        return y[..., : x.shape[-1]]


class CausalTransConv1d(nn.Module):
    """Transposed conv upsampling by `stride`; the tail that would need future input is cut.

    Output sample m sums inputs n with n * stride <= m < n * stride + kernel, so the first outputs of
    a call still need the last `ceil(kernel / stride) - 1` inputs of the previous one: streaming, those
    inputs are carried in front and their own (already emitted) outputs dropped.
    """

    takes_carry = True

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int) -> None:
        super().__init__()
        self.conv = nn.ConvTranspose1d(in_channels, out_channels, kernel_size, stride=stride)
        self.right_trim = kernel_size - stride
        self.stride = stride
        self.tail_frames = -(-kernel_size // stride) - 1
        self.stream_key = ""  # set by the decoder: this layer's name in a stream state

    def tail_shapes(self) -> dict[str, tuple[int, ...]]:
        return {self.stream_key: (self.conv.in_channels, self.tail_frames)} if self.tail_frames else {}

    def forward(self, x: torch.Tensor, carry: StreamCarry | None = None) -> torch.Tensor:
        # x: [B, C_in, T] -> [B, C_out, T * stride]
        if carry is not None and self.tail_frames:
            skip = self.tail_frames * self.stride
            return self.conv(carry.extend(self.stream_key, x))[..., skip: skip + x.shape[-1] * self.stride]
        y = self.conv(x)
        return y[..., : y.shape[-1] - self.right_trim] if self.right_trim else y


class SnakeBeta(nn.Module):
    """x + sin^2(x * e^alpha) / e^beta, per channel (log-scale parameters)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(channels))
        self.beta = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [B, C, T]; one fused pass on CUDA, the parameters exponentiated inside it (kernels/snake.py)
        return snake_beta_log(x, self.alpha, self.beta)


class ConvNeXtBlock(nn.Module):
    """Depthwise causal conv, LayerNorm, pointwise MLP, scaled residual."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dwconv = CausalConv1d(dim, dim, kernel_size=7, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), 1e-6))

    takes_carry = True

    def forward(self, x: torch.Tensor, carry: StreamCarry | None = None) -> torch.Tensor:
        # x: [B, C, T]
        h = self.norm(self.dwconv(x, carry).transpose(1, 2))  # [B, T, C]
        h = self.gamma * self.pwconv2(self.act(self.pwconv1(h)))
        return x + h.transpose(1, 2)


# Residual units run their fused form where the snake kernel runs (CUDA; the CPU under Triton's interpreter); the
# CPU's default path is the plain one, which the golden tests pin. False: the plain form everywhere.
FUSED_RESIDUALS = True


class ResidualUnit(nn.Module):
    """x + conv2(act2(conv1(act1(x)))), conv2 pointwise.

    Fused (`FUSED_RESIDUALS`, where the snake kernel runs), the unit is four kernels where it was seven: act1 also
    writes the residual base x + conv2's bias, conv1 runs without its bias, which act2 adds, and conv2 is one
    batched GEMM that adds into the base (`baddbmm`). The three elementwise passes over the unit's activations
    (two bias adds and the residual add) are gone, and so are their launches."""

    def __init__(self, dim: int, dilation: int) -> None:
        super().__init__()
        self.act1 = SnakeBeta(dim)
        self.conv1 = CausalConv1d(dim, dim, kernel_size=7, dilation=dilation)
        self.act2 = SnakeBeta(dim)
        self.conv2 = CausalConv1d(dim, dim, kernel_size=1)

    takes_carry = True

    def forward(self, x: torch.Tensor, carry: StreamCarry | None = None) -> torch.Tensor:
        if FUSED_RESIDUALS and runs_snake_kernel(x):
            return self._fused(x, carry)
        return x + self.conv2(self.act2(self.conv1(self.act1(x), carry)))

    def _fused(self, x: torch.Tensor, carry: StreamCarry | None) -> torch.Tensor:
        h, base = snake_beta_fused(x, self.act1.alpha, self.act1.beta, shift=self.conv2.conv.bias)
        if base is None:  # conv2 without a bias: the base is x itself
            base = x
        h = self.conv1(h, carry, with_bias=False)
        h, _ = snake_beta_fused(h, self.act2.alpha, self.act2.beta, bias=self.conv1.conv.bias)
        weight = self.conv2.conv.weight[:, :, 0]
        return torch.baddbmm(base, weight.expand(x.shape[0], -1, -1), h)


class UpsampleBlock(nn.Module):
    """Snake, transposed-conv upsampling (halving channels), three dilated residual units."""

    def __init__(self, in_dim: int, out_dim: int, rate: int) -> None:
        super().__init__()
        self.block = nn.ModuleList([SnakeBeta(in_dim), CausalTransConv1d(in_dim, out_dim, 2 * rate, rate)]
                                   + [ResidualUnit(out_dim, d) for d in (1, 3, 9)])

    takes_carry = True

    def forward(self, x: torch.Tensor, carry: StreamCarry | None = None) -> torch.Tensor:
        for layer in self.block:
            x = run_layer(layer, x, carry)
        return x


def run_layer(layer: nn.Module, x: torch.Tensor, carry: StreamCarry | None) -> torch.Tensor:
    """`layer(x)`, handing the carry to the layers that take one (stateless ones need none)."""
    return layer(x, carry) if getattr(layer, "takes_carry", False) else layer(x)


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
        self._lookup: tuple[tuple, torch.Tensor, torch.Tensor] | None = None

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        # codes: [B, T, K_group] -> [B, io_dim, T]: every codebook's entry in one lookup, summed over the group
        table, offsets = self.lookup_table()
        entries = F.embedding(codes + offsets, table)  # [B, T, K_group, dim]
        summed = entries[..., 0, :] if entries.shape[-2] == 1 else entries.sum(dim=-2)
        return self.output_proj(summed.transpose(1, 2))

    def lookup_table(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The group's entries as one table [K_group * size, dim] and each codebook's first row in it [K_group].

        The entries are ratios of parameters (running sum over usage); computed per call they were a clamp, a
        division, a lookup and an add for each codebook of every codec call. The table is kept until a parameter
        changes (each parameter's version: loading weights into it, moving it, bumps or replaces it), so a decode
        made after new weights sees them; a decode before CUDA graph capture (the warm-up) builds it."""
        books = [layer._codebook for layer in self.vq.layers]
        params = [p for book in books for p in (book.embedding_sum, book.cluster_usage)]
        key = tuple((p.data_ptr(), p._version, p.dtype) for p in params)
        if self._lookup is None or self._lookup[0] != key:
            with torch.no_grad():
                table = torch.cat([b.embedding_sum / b.cluster_usage.clamp(min=1e-5)[:, None] for b in books])
                size = books[0].embedding_sum.shape[0]
                offsets = torch.arange(len(books), device=table.device) * size
            self._lookup = (key, table, offsets)
        return self._lookup[1], self._lookup[2]


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
        for name, module in self.named_modules():
            if hasattr(module, "stream_key"):
                module.stream_key = name

    def tail_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every stateful layer's per-row tail shape (batch dimension left out)."""
        return {k: v for m in self.modules() if hasattr(m, "stream_key") for k, v in m.tail_shapes().items()}

    def new_stream_state(self, dtype: torch.dtype, device: torch.device) -> CodecStreamState:
        """Zero tails (a conv's zero padding, an empty attention cache) at position 0."""
        tensors = {k: torch.zeros(1, *shape, dtype=dtype, device=device) for k, shape in self.tail_shapes().items()}
        tensors[POSITION] = torch.zeros(1, dtype=torch.long, device=device)
        return CodecStreamState(tensors)

    def forward(self, codes: torch.Tensor, carry: StreamCarry | None = None) -> torch.Tensor:
        h = self.pre_conv(self.quantizer.decode(codes), carry)  # [B, latent, T]
        h = self.pre_transformer(h.transpose(1, 2), carry).transpose(1, 2)  # [B, latent, T]
        for blocks in self.upsample:
            for block in blocks:
                h = block(h, carry)  # [B, latent, T * prod(upsampling_ratios)]
        for block in self.decoder:
            h = run_layer(block, h, carry)  # ends at [B, 1, T * samples_per_frame]
        return h[:, 0]
