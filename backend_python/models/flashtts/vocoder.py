"""FlashTTS's vocoder: a HiFi-GAN generator (jik876/hifi-gan's `Generator`), 80-bin 10 ms mel -> 24 kHz.

Our own implementation of that generator: conv_pre (k7), then per upsample rate a leaky-ReLU and a transposed
conv (`ups.N`) followed by the mean of `len(resblock_kernel_sizes)` residual blocks (`resblocks.N`), then
leaky-ReLU (slope 0.01), conv_post (k7) and tanh. Names follow jik876, so its `generator` state dict loads; its
weight norm is folded into plain weights on load (`fold_weight_norm`), as FlashTTS does with
`remove_weight_norm()` before inference.

FlashTTS loads it from third_party/hifi-gan/config_streamfm10ms.json, which its repository does not ship. What is
known: 80 mels at 100 frames/s in (its mel config: hop 160 at 16 kHz), 24 kHz out, so a hop of 240 samples.
`HiFiGANConfig.full()` assumes jik876's V1 generator with rates 8 x 5 x 3 x 2 = 240 and kernels of twice the rate,
odd rates' kernels one larger so the transposed convs give exactly rate x frames: a guess of the layout, which
the real config.json replaces field for field (its keys are these fields' names).

The generator is not causal: a sample depends on mel frames to both sides (~±3 frames with the full shape), so
its audio near a window's edges depends on what the window holds there.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from protocol.settings import read_settings

LRELU_SLOPE = 0.1  # jik876's slope inside the generator; the last activation uses F.leaky_relu's 0.01


@dataclass(frozen=True)
class HiFiGANConfig:
    """The generator's fields of a jik876 config.json. Defaults: the full shape assumed for FlashTTS."""

    num_mels: int = 80
    sampling_rate: int = 24000
    upsample_rates: tuple[int, ...] = (8, 5, 3, 2)
    upsample_kernel_sizes: tuple[int, ...] = (16, 11, 7, 4)
    upsample_initial_channel: int = 512
    resblock: str = "1"
    resblock_kernel_sizes: tuple[int, ...] = (3, 7, 11)
    resblock_dilation_sizes: tuple[tuple[int, ...], ...] = ((1, 3, 5), (1, 3, 5), (1, 3, 5))

    def __post_init__(self) -> None:
        object.__setattr__(self, "upsample_rates", tuple(self.upsample_rates))
        object.__setattr__(self, "upsample_kernel_sizes", tuple(self.upsample_kernel_sizes))
        object.__setattr__(self, "resblock_kernel_sizes", tuple(self.resblock_kernel_sizes))
        object.__setattr__(self, "resblock_dilation_sizes", tuple(tuple(d) for d in self.resblock_dilation_sizes))
        if len(self.upsample_rates) != len(self.upsample_kernel_sizes):
            raise ValueError("need one upsample kernel size per upsample rate")
        if any((k - u) % 2 for u, k in zip(self.upsample_rates, self.upsample_kernel_sizes)):
            raise ValueError("each upsample kernel size minus its rate must be even (exactly rate x frames out)")
        if self.resblock not in ("1", "2"):
            raise ValueError(f"resblock must be '1' or '2', got {self.resblock!r}")
        if len(self.resblock_kernel_sizes) != len(self.resblock_dilation_sizes):
            raise ValueError("need one dilation list per resblock kernel size")

    @property
    def hop_length(self) -> int:
        """Samples per mel frame."""
        return math.prod(self.upsample_rates)

    @classmethod
    def from_dict(cls, d: dict) -> "HiFiGANConfig":
        return read_settings(cls, d, ignore_unknown=True)

    def to_dict(self) -> dict:
        return {"num_mels": self.num_mels, "sampling_rate": self.sampling_rate,
                "upsample_rates": list(self.upsample_rates), "upsample_kernel_sizes": list(self.upsample_kernel_sizes),
                "upsample_initial_channel": self.upsample_initial_channel, "resblock": self.resblock,
                "resblock_kernel_sizes": list(self.resblock_kernel_sizes),
                "resblock_dilation_sizes": [list(d) for d in self.resblock_dilation_sizes]}


def same_padding(kernel_size: int, dilation: int) -> int:
    return (kernel_size * dilation - dilation) // 2


class ResBlock1(nn.Module):
    """Per dilation d: x + conv(lrelu(conv_d(lrelu(x)))) (`convs1` dilated, `convs2` not)."""

    def __init__(self, channels: int, kernel_size: int, dilations: tuple[int, ...]) -> None:
        super().__init__()
        self.convs1 = nn.ModuleList(nn.Conv1d(channels, channels, kernel_size, dilation=d,
                                              padding=same_padding(kernel_size, d)) for d in dilations)
        self.convs2 = nn.ModuleList(nn.Conv1d(channels, channels, kernel_size, padding=same_padding(kernel_size, 1))
                                    for _ in dilations)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv1, conv2 in zip(self.convs1, self.convs2):
            x = x + conv2(F.leaky_relu(conv1(F.leaky_relu(x, LRELU_SLOPE)), LRELU_SLOPE))
        return x


class ResBlock2(nn.Module):
    """Per dilation d: x + conv_d(lrelu(x)) (`convs`)."""

    def __init__(self, channels: int, kernel_size: int, dilations: tuple[int, ...]) -> None:
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv1d(channels, channels, kernel_size, dilation=d,
                                             padding=same_padding(kernel_size, d)) for d in dilations)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv in self.convs:
            x = x + conv(F.leaky_relu(x, LRELU_SLOPE))
        return x


class HiFiGAN(nn.Module):
    """mel [B, num_mels, M] -> audio [B, M * hop_length] in [-1, 1]."""

    def __init__(self, cfg: HiFiGANConfig) -> None:
        super().__init__()
        self.cfg = cfg
        channels = cfg.upsample_initial_channel
        self.conv_pre = nn.Conv1d(cfg.num_mels, channels, 7, padding=3)
        block = ResBlock1 if cfg.resblock == "1" else ResBlock2
        self.ups, self.resblocks = nn.ModuleList(), nn.ModuleList()
        for i, (rate, kernel) in enumerate(zip(cfg.upsample_rates, cfg.upsample_kernel_sizes)):
            self.ups.append(nn.ConvTranspose1d(channels >> i, channels >> (i + 1), kernel, rate,
                                               padding=(kernel - rate) // 2))
            self.resblocks.extend(block(channels >> (i + 1), k, d)
                                  for k, d in zip(cfg.resblock_kernel_sizes, cfg.resblock_dilation_sizes))
        self.conv_post = nn.Conv1d(channels >> len(cfg.upsample_rates), 1, 7, padding=3)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        x = self.conv_pre(mel.to(self.conv_pre.weight.dtype))
        num_kernels = len(self.cfg.resblock_kernel_sizes)
        for i, up in enumerate(self.ups):
            x = up(F.leaky_relu(x, LRELU_SLOPE))
            x = sum(self.resblocks[i * num_kernels + j](x) for j in range(num_kernels)) / num_kernels
        return torch.tanh(self.conv_post(F.leaky_relu(x)))[:, 0].float()


def fold_weight_norm(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A state dict with weight-normed convs (`X.weight_g` + `X.weight_v`, or torch's parametrization keys
    `X.parametrizations.weight.original0/1`) -> plain `X.weight`: g * v / ||v||, the norm over every dim but 0
    (weight_norm's default `dim=0`, for convs and transposed convs alike)."""
    out = {}
    for key, value in state.items():
        for g_suffix, v_suffix in ((".weight_g", ".weight_v"),
                                   (".parametrizations.weight.original0", ".parametrizations.weight.original1")):
            if key.endswith(v_suffix):
                break
            if key.endswith(g_suffix):
                v = state[key[: -len(g_suffix)] + v_suffix].float()
                norm = v.flatten(1).norm(dim=1).view(-1, *[1] * (v.dim() - 1))
                out[key[: -len(g_suffix)] + ".weight"] = (value.float() * v / norm).to(value.dtype)
                break
        else:
            out[key] = value
    return out
