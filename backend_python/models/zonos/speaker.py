"""Zonos's speaker model (the reference's `speaker_cloning.py`, read and rewritten): 16 kHz audio -> log-mel
(80 bins, 25 ms windows every 10 ms, mean-normalised over time) -> ResNet293 with SimAM blocks -> attentive
statistics pooling -> a 256-d embedding -> its LDA to the 128-d speaker vector the LM's speaker conditioner takes.

Parameter names are the official files' (Zyphra/Zonos-v0.1-speaker-embedding): `ResNet293_SimAM_ASP_base.pt`
(`front.*`, `pooling.*`, `bottleneck.*`) and `ResNet293_SimAM_ASP_base_LDA-128.pt` (`weight`, `bias`). The mel
front end is torchaudio's `MelSpectrogram` rewritten in torch (HTK mel scale, no filter norm, a centred, reflect-
padded periodic Hann window), since torchaudio has no wheel here; tests/unit/test_zonos_speaker.py checks it
against transformers' own spectrogram code.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from protocol.settings import read_settings

SAMPLE_RATE = 16_000
N_FFT, WIN_LENGTH, HOP_LENGTH, N_MELS = 512, 400, 160, 80


@dataclass(frozen=True)
class SpeakerConfig:
    """The reference's `ResNet293_based()` defaults, and its LDA's output."""

    in_planes: int = 64
    num_blocks: tuple[int, ...] = (10, 20, 64, 3)
    embd_dim: int = 256
    lda_dim: int = 128

    @classmethod
    def from_dict(cls, d: dict) -> "SpeakerConfig":
        return read_settings(cls, d, ignore_unknown=True)

    def to_dict(self) -> dict:
        return {"in_planes": self.in_planes, "num_blocks": list(self.num_blocks), "embd_dim": self.embd_dim,
                "lda_dim": self.lda_dim}


def mel_filters(device: torch.device | None = None) -> torch.Tensor:
    """[n_fft / 2 + 1, 80] HTK-scale triangles from 0 to 8 kHz, unnormalised (torchaudio's `melscale_fbanks`)."""
    freqs = torch.linspace(0, SAMPLE_RATE // 2, N_FFT // 2 + 1, device=device)
    mel_max = 2595.0 * math.log10(1.0 + (SAMPLE_RATE / 2) / 700.0)
    hz = 700.0 * (10 ** (torch.linspace(0.0, mel_max, N_MELS + 2, device=device) / 2595.0) - 1.0)
    diff = hz[1:] - hz[:-1]
    slopes = hz[None] - freqs[:, None]  # [freqs, mels + 2]
    down, up = -slopes[:, :-2] / diff[:-1], slopes[:, 2:] / diff[1:]
    return torch.clamp(torch.minimum(down, up), min=0.0)


def log_fbank(wav: torch.Tensor) -> torch.Tensor:
    """wav [N] float32 at 16 kHz -> [80, T] log-mel power, minus its mean over time."""
    window = torch.hann_window(WIN_LENGTH, device=wav.device)
    spec = torch.stft(wav, N_FFT, HOP_LENGTH, WIN_LENGTH, window, center=True, pad_mode="reflect",
                      return_complex=True).abs().pow(2)  # [freqs, T]
    mel = (spec.T @ mel_filters(wav.device)).T
    log = torch.log(mel + 1e-6)
    return log - log.mean(dim=1, keepdim=True)


class SimAMBasicBlock(nn.Module):
    def __init__(self, in_planes: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = nn.Sequential()
        if stride != 1 or in_planes != planes:
            self.downsample = nn.Sequential(nn.Conv2d(in_planes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(simam(out) + self.downsample(x))


def simam(x: torch.Tensor, lambda_p: float = 1e-4) -> torch.Tensor:
    """x [B, C, H, W] weighted by the sigmoid of its parameter-free energy (SimAM)."""
    n = x.shape[2] * x.shape[3] - 1
    d = (x - x.mean(dim=(2, 3), keepdim=True)).pow(2)
    v = d.sum(dim=(2, 3), keepdim=True) / n
    return x * torch.sigmoid(d / (4 * (v + lambda_p)) + 0.5)


class ResNet(nn.Module):
    """`front`: conv, then four stages of SimAM blocks at 1, 2, 4 and 8 times `in_planes` (strides 1, 2, 2, 2)."""

    def __init__(self, in_planes: int, num_blocks: tuple[int, ...]) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, in_planes, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(in_planes)
        planes_in, stages = in_planes, []
        for stage, count in enumerate(num_blocks):
            planes = in_planes * 2 ** stage
            blocks = []
            for i in range(count):
                blocks.append(SimAMBasicBlock(planes_in, planes, 2 if stage and not i else 1))
                planes_in = planes
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn1(self.conv1(x)))
        return self.layer4(self.layer3(self.layer2(self.layer1(x))))


class ASP(nn.Module):
    """Attentive statistics pooling over time: weighted mean and std of each (channel, mel band) row."""

    def __init__(self, in_planes: int, acoustic_dim: int = N_MELS) -> None:
        super().__init__()
        channels = in_planes * 8 * (acoustic_dim // 8)
        self.out_dim = 2 * channels
        self.attention = nn.Sequential(nn.Conv1d(channels, 128, 1), nn.ReLU(), nn.BatchNorm1d(128),
                                       nn.Conv1d(128, channels, 1), nn.Softmax(dim=2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(x.shape[0], -1, x.shape[-1])  # [B, C * H, T]
        w = self.attention(x)
        mu = (x * w).sum(dim=2)
        sg = ((x ** 2 * w).sum(dim=2) - mu ** 2).clamp(min=1e-5).sqrt()
        return torch.cat((mu, sg), dim=1)


class SpeakerEmbedding(nn.Module):
    """`ResNet293_based` (`front`, `pooling`, `bottleneck`) and, separately loaded, its `lda`."""

    def __init__(self, config: SpeakerConfig) -> None:
        super().__init__()
        self.config = config
        self.front = ResNet(config.in_planes, config.num_blocks)
        self.pooling = ASP(config.in_planes)
        self.bottleneck = nn.Linear(self.pooling.out_dim, config.embd_dim)
        self.lda = nn.Linear(config.embd_dim, config.lda_dim)

    def forward(self, wav: torch.Tensor) -> torch.Tensor:
        """wav [N] float32 at 16 kHz -> the 128-d speaker vector (float32)."""
        features = log_fbank(wav.float())[None, None]  # [1, 1, 80, T]
        embedding = self.bottleneck(self.pooling(self.front(features)))
        return self.lda(embedding.float())[0]


def random_speaker_model(config: SpeakerConfig, seed: int) -> SpeakerEmbedding:
    """Random weights, deterministic in seed: convolutions and linears He-normal with zero biases (torch's default
    init fades through the blocks until every audio gives nearly the same vector), BatchNorm at identity."""
    model = SpeakerEmbedding(config).eval()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (nn.Conv1d, nn.Conv2d, nn.Linear)):
                module.weight.normal_(0.0, (2.0 / module.weight[0].numel()) ** 0.5, generator=generator)
                if module.bias is not None:
                    module.bias.zero_()
    return model
