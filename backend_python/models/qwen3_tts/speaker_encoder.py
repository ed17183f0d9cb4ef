"""The Base model's speaker encoder (`speaker_encoder.*`): 24 kHz mono audio -> one x-vector.

Our own implementation of the reference `Qwen3TTSSpeakerEncoder` (qwen-tts 0.1.1), an ECAPA-TDNN:
a TDNN, SE-Res2Net blocks, multi-layer aggregation, attentive statistics pooling and a final 1x1 conv.
Module names follow the official checkpoint so its `speaker_encoder.*` tensors load as they are. Its
front end is the reference's log-mel spectrogram (`mel_spectrogram`): n_fft 1024, hop 256, 128 Slaney
mel bands over 0..12 kHz, magnitude (not power), log with a 1e-5 floor. The convs pad by reflection
("same"), and the pooling sees the whole utterance, so each utterance is encoded alone: padding a batch
would change its statistics.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .config import SpeakerEncoderConfig

N_FFT, HOP_SIZE, WIN_SIZE = 1024, 256, 1024  # the reference's `extract_speaker_embedding` settings
MEL_FMIN, MEL_FMAX = 0.0, 12000.0
LOG_FLOOR = 1e-5
MAGNITUDE_EPS = 1e-9
POOLING_EPS = 1e-12


def mel_filters(num_mels: int, sample_rate: int) -> torch.Tensor:
    """Slaney-normalised mel filterbank on the Slaney mel scale, librosa's default: [num_mels, N_FFT/2 + 1]."""
    from transformers.audio_utils import mel_filter_bank  # numpy only; matches librosa.filters.mel to 2e-9

    bank = mel_filter_bank(num_frequency_bins=N_FFT // 2 + 1, num_mel_filters=num_mels, min_frequency=MEL_FMIN,
                           max_frequency=MEL_FMAX, sampling_rate=sample_rate, norm="slaney", mel_scale="slaney")
    return torch.from_numpy(bank.T).float()


def mel_spectrogram(audio: torch.Tensor, filters: torch.Tensor) -> torch.Tensor:
    """audio: [N] float32 -> log-mel [frames, num_mels] float32, frames = (N + pad) // HOP_SIZE (no centring)."""
    pad = (N_FFT - HOP_SIZE) // 2
    audio = F.pad(audio[None, None], (pad, pad), mode="reflect")[0]
    window = torch.hann_window(WIN_SIZE, device=audio.device)
    spec = torch.stft(audio, N_FFT, hop_length=HOP_SIZE, win_length=WIN_SIZE, window=window, center=False,
                      normalized=False, onesided=True, return_complex=True)
    magnitude = torch.sqrt(torch.view_as_real(spec).pow(2).sum(-1) + MAGNITUDE_EPS)  # [1, bins, frames]
    return torch.log(torch.clamp(filters @ magnitude, min=LOG_FLOOR))[0].T


def same_conv(in_channels: int, out_channels: int, kernel_size: int = 1, dilation: int = 1) -> nn.Conv1d:
    return nn.Conv1d(in_channels, out_channels, kernel_size, dilation=dilation, padding="same",
                     padding_mode="reflect")


class TimeDelayNetBlock(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, dilation: int) -> None:
        super().__init__()
        self.conv = same_conv(in_channels, out_channels, kernel_size, dilation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.conv(x))


class Res2NetBlock(nn.Module):
    """Channels split into `scale` groups; group i > 0 is a TDNN of itself plus the previous group's output."""

    def __init__(self, channels: int, scale: int, kernel_size: int, dilation: int) -> None:
        super().__init__()
        width = channels // scale
        self.scale = scale
        self.blocks = nn.ModuleList(TimeDelayNetBlock(width, width, kernel_size, dilation) for _ in range(scale - 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = list(torch.chunk(x, self.scale, dim=1))
        out = [parts[0]]
        for i, block in enumerate(self.blocks, start=1):
            out.append(block(parts[i] if i == 1 else parts[i] + out[-1]))
        return torch.cat(out, dim=1)


class SqueezeExcitationBlock(nn.Module):
    def __init__(self, channels: int, se_channels: int) -> None:
        super().__init__()
        self.conv1 = same_conv(channels, se_channels)
        self.conv2 = same_conv(se_channels, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = torch.sigmoid(self.conv2(F.relu(self.conv1(x.mean(dim=2, keepdim=True)))))
        return x * gate


class SqueezeExcitationRes2NetBlock(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, cfg: SpeakerEncoderConfig, kernel_size: int,
                 dilation: int) -> None:
        super().__init__()
        self.tdnn1 = TimeDelayNetBlock(in_channels, out_channels, 1, 1)
        self.res2net_block = Res2NetBlock(out_channels, cfg.enc_res2net_scale, kernel_size, dilation)
        self.tdnn2 = TimeDelayNetBlock(out_channels, out_channels, 1, 1)
        self.se_block = SqueezeExcitationBlock(out_channels, cfg.enc_se_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.se_block(self.tdnn2(self.res2net_block(self.tdnn1(x))))


def weighted_stats(x: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x, weights: [B, C, T] (weights sum to 1 over T) -> (mean, std): [B, C] each."""
    mean = (weights * x).sum(dim=2)
    std = torch.sqrt((weights * (x - mean[..., None]).pow(2)).sum(dim=2).clamp(POOLING_EPS))
    return mean, std


class AttentiveStatisticsPooling(nn.Module):
    """Per-channel attention over time, conditioned on the utterance's mean and std: -> [B, 2C, 1]."""

    def __init__(self, channels: int, attention_channels: int) -> None:
        super().__init__()
        self.tdnn = TimeDelayNetBlock(channels * 3, attention_channels, 1, 1)
        self.conv = same_conv(attention_channels, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        num_frames = x.shape[-1]
        mean, std = weighted_stats(x, torch.full_like(x, 1.0 / num_frames))
        context = torch.cat((x, mean[..., None].expand_as(x), std[..., None].expand_as(x)), dim=1)
        attention = torch.softmax(self.conv(torch.tanh(self.tdnn(context))), dim=2)
        mean, std = weighted_stats(x, attention)
        return torch.cat((mean, std), dim=1)[..., None]


class SpeakerEncoder(nn.Module):
    """log-mel [B, T, mel_dim] -> x-vector [B, enc_dim]."""

    def __init__(self, cfg: SpeakerEncoderConfig) -> None:
        super().__init__()
        channels, kernels, dilations = cfg.enc_channels, cfg.enc_kernel_sizes, cfg.enc_dilations
        self.blocks = nn.ModuleList([TimeDelayNetBlock(cfg.mel_dim, channels[0], kernels[0], dilations[0])])
        for i in range(1, len(channels) - 1):
            self.blocks.append(SqueezeExcitationRes2NetBlock(channels[i - 1], channels[i], cfg, kernels[i],
                                                             dilations[i]))
        self.mfa = TimeDelayNetBlock(channels[-1], channels[-1], kernels[-1], dilations[-1])  # takes the blocks concatenated
        self.asp = AttentiveStatisticsPooling(channels[-1], cfg.enc_attention_channels)
        self.fc = same_conv(channels[-1] * 2, cfg.enc_dim)

    def forward(self, mels: torch.Tensor) -> torch.Tensor:
        x = mels.transpose(1, 2)  # [B, mel_dim, T]
        outputs = []
        for block in self.blocks:
            x = block(x)
            outputs.append(x)
        x = self.mfa(torch.cat(outputs[1:], dim=1))  # the SE-Res2Net outputs, aggregated
        return self.fc(self.asp(x))[..., 0]
