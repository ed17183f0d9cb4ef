"""CAM++'s front end: Kaldi's log mel filterbank, as CosyVoice computes it before campplus.onnx.

CosyVoice's `_extract_spk_embedding` runs `torchaudio.compliance.kaldi.fbank(speech, num_mel_bins=80, dither=0,
sample_frequency=16000)` on 16 kHz audio in [-1, 1] and subtracts each bin's mean over the utterance. Written
here with torch (no torchaudio), Kaldi's defaults: 25 ms frames every 10 ms, only whole frames ("snip edges"),
each frame's DC offset removed, pre-emphasis 0.97, a Povey window, zero-padded to a power of two, the power
spectrum, triangular bins equally spaced on Kaldi's mel scale (1127 ln(1 + f / 700)) from 20 Hz to Nyquist,
the log with float32's epsilon as its floor.
"""
from __future__ import annotations

import math

import torch

FRAME_LENGTH_MS, FRAME_SHIFT_MS = 25.0, 10.0
PREEMPHASIS = 0.97
POVEY_EXPONENT = 0.85  # Kaldi's "povey" window: a (symmetric) Hann window to the 0.85
LOW_FREQ_HZ = 20.0  # the lowest bin's left edge; the highest bin's right edge is Nyquist
LOG_FLOOR = torch.finfo(torch.float32).eps


def frame_sizes(sample_rate: int) -> tuple[int, int, int]:
    """(frame length, frame shift, FFT size) in samples: 400, 160 and 512 at 16 kHz."""
    length = int(sample_rate * FRAME_LENGTH_MS / 1000)
    shift = int(sample_rate * FRAME_SHIFT_MS / 1000)
    return length, shift, 1 << (length - 1).bit_length()


def num_frames(num_samples: int, sample_rate: int) -> int:
    """Whole frames only: none under one frame's length."""
    length, shift, _ = frame_sizes(sample_rate)
    return 0 if num_samples < length else 1 + (num_samples - length) // shift


def kaldi_mel(hz: torch.Tensor | float) -> torch.Tensor | float:
    if isinstance(hz, torch.Tensor):
        return 1127.0 * torch.log1p(hz / 700.0)
    return 1127.0 * math.log1p(hz / 700.0)


def mel_banks(num_bins: int, sample_rate: int) -> torch.Tensor:
    """Kaldi's triangular filters: [num_bins, fft_size // 2 + 1] float32 (the Nyquist bin's weights are 0)."""
    _, _, fft_size = frame_sizes(sample_rate)
    low, high = kaldi_mel(LOW_FREQ_HZ), kaldi_mel(sample_rate / 2)
    delta = (high - low) / (num_bins + 1)
    left = low + delta * torch.arange(num_bins, dtype=torch.float64)[:, None]  # [num_bins, 1]
    center, right = left + delta, left + 2 * delta
    mel = kaldi_mel(torch.arange(fft_size // 2, dtype=torch.float64) * sample_rate / fft_size)[None]
    weights = torch.minimum((mel - left) / (center - left), (right - mel) / (right - center)).clamp(min=0)
    return torch.nn.functional.pad(weights, (0, 1)).float()


def povey_window(length: int, device: torch.device) -> torch.Tensor:
    return torch.hann_window(length, periodic=False, dtype=torch.float64, device=device).pow(POVEY_EXPONENT).float()


def fbank(audio: torch.Tensor, banks: torch.Tensor, sample_rate: int) -> torch.Tensor:
    """audio: [N] float32 -> log mel energies [num_frames(N), num_bins] float32."""
    length, shift, fft_size = frame_sizes(sample_rate)
    if audio.numel() < length:
        return torch.zeros(0, banks.shape[0], device=audio.device)
    frames = audio.float().unfold(0, length, shift)  # [T, length]
    frames = frames - frames.mean(dim=1, keepdim=True)  # each frame's DC offset
    previous = torch.cat([frames[:, :1], frames[:, :-1]], dim=1)  # Kaldi repeats a frame's first sample
    frames = (frames - PREEMPHASIS * previous) * povey_window(length, audio.device)
    power = torch.fft.rfft(frames, n=fft_size).abs().pow(2)  # [T, fft_size // 2 + 1]
    return torch.log(torch.clamp(power @ banks.T, min=LOG_FLOOR))


def utterance_features(audio: list[torch.Tensor], banks: torch.Tensor,
                       sample_rate: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each utterance's fbank less its mean over the utterance, right-padded with zeros into one batch:
    (features [B, max T_i, num_bins] float32, lengths [B] int64), on the banks' device."""
    feats = [fbank(a.to(banks.device), banks, sample_rate) for a in audio]
    feats = [f - f.mean(dim=0, keepdim=True) for f in feats]
    lengths = torch.tensor([f.shape[0] for f in feats], dtype=torch.long, device=banks.device)
    return torch.nn.utils.rnn.pad_sequence(feats, batch_first=True), lengths
