"""CosyVoice 3's vocoder: the reference's CausalHiFTGenerator (HiFTNet: a neural source filter + iSTFTNet).

mel [B, 80, T] (50 Hz) -> f0 (a conv net reading 3 frames ahead, then causal) -> an NSF source at 24 kHz
-> a HiFi-GAN-style upsampler (causal convs, x8 x5 x3) fused with the source's STFT at every rate -> an
iSTFT head (n_fft 16, hop 4): 480 samples per mel frame. Only `conv_pre` (4 frames) and the f0 net's first
conv (3 frames) read ahead; everything after them is causal.

Module names mirror the reference's (its hift.pt keys); weight norm is folded into plain weights when a
checkpoint loads (`fold_weight_norm`). Three changes for serving, all deterministic:
- The sine source's phase starts at 0 for every harmonic (the reference's causal SineGen2 adds a random
  initial phase that its frame-rate resampling never reads, so this is exact), and it is accumulated in
  float64 (the reference's float32 cumsum drifts over long utterances).
- The phase restarts from 0 every `phase_reset_frames` mel frames of the stream (0: never, the reference).
  The reference's running phase is a sum over every frame since the stream's start, which no window can
  know; restarting it on a grid of stream positions lets a window (that knows where it starts:
  `start_frames`) reproduce the full decode's audio exactly when a restart lies >= 8 mel frames into it
  (past the f0 net's reach) and >= 24 before its new frames (HiFT's memory of the source). Little is
  lost: the causal source is sampled once per 20 ms frame (see SourceModule), so its phase already jumps
  by 2 pi f0 h / 50 at every frame; a restart is one more such jump per period.
- The source's additive noise is left out: the reference's is a fixed uniform tensor at inference, zero-mean
  Gaussian in training; we take the training noise's mean, 0. (Its noise branch output is unused anyway.)
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class HiFTConfig:
    """The reference CausalHiFTGenerator's arguments (cosyvoice3.yaml `hift`), its f0 predictor's included."""

    in_channels: int = 80
    base_channels: int = 512
    nb_harmonics: int = 8
    sampling_rate: int = 24000
    nsf_alpha: float = 0.1
    nsf_sigma: float = 0.003
    nsf_voiced_threshold: float = 10.0
    upsample_rates: tuple[int, ...] = (8, 5, 3)
    upsample_kernel_sizes: tuple[int, ...] = (16, 11, 7)
    istft_n_fft: int = 16
    istft_hop_len: int = 4
    resblock_kernel_sizes: tuple[int, ...] = (3, 7, 11)
    resblock_dilation_sizes: tuple[tuple[int, ...], ...] = ((1, 3, 5), (1, 3, 5), (1, 3, 5))
    source_resblock_kernel_sizes: tuple[int, ...] = (7, 7, 11)
    source_resblock_dilation_sizes: tuple[tuple[int, ...], ...] = ((1, 3, 5), (1, 3, 5), (1, 3, 5))
    lrelu_slope: float = 0.1
    audio_limit: float = 0.99
    conv_pre_look_right: int = 4
    f0_cond_channels: int = 512
    phase_reset_frames: int = 32  # ours: the sine phase restarts every 32 mel frames of the stream (0: never)

    def __post_init__(self) -> None:
        for name in ("upsample_rates", "upsample_kernel_sizes", "resblock_kernel_sizes",
                     "source_resblock_kernel_sizes"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        for name in ("resblock_dilation_sizes", "source_resblock_dilation_sizes"):
            object.__setattr__(self, name, tuple(tuple(d) for d in getattr(self, name)))
        num_ups = len(self.upsample_rates)
        if not (len(self.upsample_kernel_sizes) == len(self.source_resblock_kernel_sizes)
                == len(self.source_resblock_dilation_sizes) == num_ups):
            raise ValueError("need one kernel size and one source resblock per upsample rate")
        if len(self.resblock_kernel_sizes) != len(self.resblock_dilation_sizes):
            raise ValueError("need one dilation list per resblock kernel size")
        if self.phase_reset_frames < 0:
            raise ValueError(f"phase_reset_frames must be >= 0, got {self.phase_reset_frames}")
        if self.base_channels % 2 ** num_ups:
            raise ValueError(f"base_channels must halve {num_ups} times")

    @property
    def samples_per_mel_frame(self) -> int:
        return math.prod(self.upsample_rates) * self.istft_hop_len

    def to_dict(self) -> dict:
        return asdict(self)


def causal_padding(kernel_size: int, dilation: int = 1) -> int:
    """The reference CausalConv1d's padding (kernel - 1) * dilation for every size it uses."""
    return int((kernel_size * dilation - dilation) / 2) * 2 + (kernel_size + 1) % 2


class CausalConv1d(nn.Conv1d):
    """Stride 1, zero-padded on one side: 'left' (causal) or 'right' (reads ahead)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, dilation: int = 1,
                 causal_type: str = "left") -> None:
        super().__init__(in_channels, out_channels, kernel_size, dilation=dilation)
        self.causal_padding = causal_padding(kernel_size, dilation)
        self.pad = (self.causal_padding, 0) if causal_type == "left" else (0, self.causal_padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(F.pad(x, self.pad))


class CausalConv1dDownSample(nn.Conv1d):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride)
        self.causal_padding = stride - 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(F.pad(x, (self.causal_padding, 0)))


class CausalConv1dUpsample(nn.Conv1d):
    """Nearest-neighbour upsampling by `stride`, then a causal conv."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int) -> None:
        super().__init__(in_channels, out_channels, kernel_size)
        self.stride_up = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.repeat_interleave(self.stride_up, dim=-1)
        return super().forward(F.pad(x, (self.kernel_size[0] - 1, 0)))


class Snake(nn.Module):
    """x + sin^2(alpha x) / alpha, alpha per channel (linear scale)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        alpha = self.alpha[None, :, None]
        return x + (1.0 / (alpha + 1e-9)) * torch.sin(x * alpha).pow(2)


class ResBlock(nn.Module):
    def __init__(self, channels: int, kernel_size: int, dilations: tuple[int, ...]) -> None:
        super().__init__()
        self.convs1 = nn.ModuleList([CausalConv1d(channels, channels, kernel_size, d) for d in dilations])
        self.convs2 = nn.ModuleList([CausalConv1d(channels, channels, kernel_size, 1) for _ in dilations])
        self.activations1 = nn.ModuleList([Snake(channels) for _ in dilations])
        self.activations2 = nn.ModuleList([Snake(channels) for _ in dilations])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv1, conv2, act1, act2 in zip(self.convs1, self.convs2, self.activations1, self.activations2):
            x = x + conv2(act2(conv1(act1(x))))
        return x


class F0Predictor(nn.Module):
    """The reference CausalConvRNNF0Predictor: mel [B, 80, T] -> f0 [B, T] Hz (>= 0)."""

    def __init__(self, in_channels: int, cond_channels: int) -> None:
        super().__init__()
        layers: list[nn.Module] = [CausalConv1d(in_channels, cond_channels, 4, causal_type="right"), nn.ELU()]
        for _ in range(4):
            layers += [CausalConv1d(cond_channels, cond_channels, 3), nn.ELU()]
        self.condnet = nn.Sequential(*layers)
        self.classifier = nn.Linear(cond_channels, 1)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.condnet(mel).transpose(1, 2)).squeeze(-1).abs()


class SourceModule(nn.Module):
    """The harmonic branch of the reference SourceModuleHnNSF with its causal SineGen2, at frame rate.

    The causal SineGen2 samples the phase once per mel frame (linear downsampling of a nearest-upsampled
    f0 reads one frame's value; the phase is then held for the frame's samples), so the source is a
    constant per frame: computed per frame here, and repeated to samples by the caller.
    """

    def __init__(self, cfg: HiFTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.l_linear = nn.Linear(cfg.nb_harmonics + 1, 1)

    def forward(self, f0: torch.Tensor, start_frames: torch.Tensor) -> torch.Tensor:
        """f0: [B, T] Hz, start_frames: [B] each row's first mel frame's index in its stream -> source [B, T]
        per mel frame (float32)."""
        cfg = self.cfg
        harmonics = torch.arange(1, cfg.nb_harmonics + 2, device=f0.device, dtype=torch.float64)
        rad = (f0.double()[..., None] * harmonics / cfg.sampling_rate) % 1  # [B, T, H] cycles per sample
        cycles = torch.cumsum(rad, dim=1)
        cycles = cycles - self.cycles_before_restart(cycles, start_frames)
        phase = cycles * cfg.samples_per_mel_frame % 1 * (2 * math.pi)
        voiced = (f0 > cfg.nsf_voiced_threshold)[..., None]
        sines = (cfg.nsf_alpha * torch.sin(phase)).float() * voiced
        return torch.tanh(self.l_linear(sines.to(self.l_linear.weight.dtype))).squeeze(-1).float()

    def cycles_before_restart(self, cycles: torch.Tensor, start_frames: torch.Tensor) -> torch.Tensor:
        """The running sum `cycles` [B, T, H] as it stood just before each frame's latest phase restart
        (0 before the row's first frame, where every window starts its sum)."""
        period = self.cfg.phase_reset_frames
        if period == 0:
            return torch.zeros_like(cycles)
        frames = torch.arange(cycles.shape[1], device=cycles.device)
        is_restart = (start_frames[:, None] + frames) % period == 0  # [B, T]
        latest = torch.where(is_restart, frames, torch.zeros_like(frames)).cummax(dim=1).values  # [B, T]
        before = F.pad(cycles, (0, 0, 1, 0))  # before[:, j] = cycles[:, j - 1], 0 at j = 0
        return torch.gather(before, 1, latest[..., None].expand(-1, -1, cycles.shape[2]))


class HiFTGenerator(nn.Module):
    """mel [B, in_channels, T] -> audio [B, T * samples_per_mel_frame] float32 in [-audio_limit, audio_limit]."""

    def __init__(self, cfg: HiFTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.m_source = SourceModule(cfg)
        self.conv_pre = CausalConv1d(cfg.in_channels, cfg.base_channels, cfg.conv_pre_look_right + 1,
                                     causal_type="right")
        self.ups = nn.ModuleList([
            CausalConv1dUpsample(cfg.base_channels // 2 ** i, cfg.base_channels // 2 ** (i + 1), k, u)
            for i, (u, k) in enumerate(zip(cfg.upsample_rates, cfg.upsample_kernel_sizes))])
        self.source_downs, self.source_resblocks = self._source_branches(cfg)
        channels = [cfg.base_channels // 2 ** (i + 1) for i in range(len(cfg.upsample_rates))]
        self.resblocks = nn.ModuleList([
            ResBlock(ch, k, d) for ch in channels
            for k, d in zip(cfg.resblock_kernel_sizes, cfg.resblock_dilation_sizes)])
        self.conv_post = CausalConv1d(channels[-1], cfg.istft_n_fft + 2, 7)
        self.f0_predictor = F0Predictor(cfg.in_channels, cfg.f0_cond_channels)
        self.register_buffer("stft_window", torch.hann_window(cfg.istft_n_fft, periodic=True), persistent=False)

    @staticmethod
    def _source_branches(cfg: HiFTConfig) -> tuple[nn.ModuleList, nn.ModuleList]:
        """Per upsampling stage: the source STFT brought down to that stage's rate, and a resblock."""
        rates = list(cfg.upsample_rates)
        strides = [math.prod(rates[i + 1:]) for i in range(len(rates))]  # e.g. 15, 3, 1
        downs, blocks = nn.ModuleList(), nn.ModuleList()
        for i, (stride, k, d) in enumerate(zip(strides, cfg.source_resblock_kernel_sizes,
                                               cfg.source_resblock_dilation_sizes)):
            ch = cfg.base_channels // 2 ** (i + 1)
            downs.append(CausalConv1d(cfg.istft_n_fft + 2, ch, 1) if stride == 1
                         else CausalConv1dDownSample(cfg.istft_n_fft + 2, ch, stride * 2, stride))
            blocks.append(ResBlock(ch, k, d))
        return downs, blocks

    def source(self, mel: torch.Tensor, start_frames: torch.Tensor) -> torch.Tensor:
        """mel [B, C, T] -> the NSF source [B, T * samples_per_mel_frame] float32 (f0 in float64, as the reference)."""
        f0 = self.f0_predictor(mel.to(self.f0_predictor.classifier.weight.dtype))
        return self.m_source(f0, start_frames).repeat_interleave(self.cfg.samples_per_mel_frame, dim=1)

    def forward(self, mel: torch.Tensor, start_frames: torch.Tensor | None = None) -> torch.Tensor:
        """`start_frames` [B]: each row's first mel frame's index in its stream (None: 0)."""
        cfg = self.cfg
        if start_frames is None:
            start_frames = torch.zeros(mel.shape[0], dtype=torch.long, device=mel.device)
        mel = mel.to(self.conv_pre.weight.dtype)
        s_stft = self._stft(self.source(mel, start_frames).to(mel.dtype))
        x = self.conv_pre(mel)
        for i, up in enumerate(self.ups):
            x = up(F.leaky_relu(x, cfg.lrelu_slope))
            if i == len(self.ups) - 1:
                x = F.pad(x, (1, 0), mode="reflect")
            x = x + self.source_resblocks[i](self.source_downs[i](s_stft))
            blocks = self.resblocks[i * len(cfg.resblock_kernel_sizes):(i + 1) * len(cfg.resblock_kernel_sizes)]
            x = sum(block(x) for block in blocks) / len(blocks)
        x = self.conv_post(F.leaky_relu(x))
        half = cfg.istft_n_fft // 2 + 1
        audio = self._istft(torch.exp(x[:, :half]), torch.sin(x[:, half:]))
        return audio.float().clamp(-cfg.audio_limit, cfg.audio_limit)

    def _stft(self, signal: torch.Tensor) -> torch.Tensor:
        """[B, L] -> [B, n_fft + 2, L / hop + 1]: real parts, then imaginary parts."""
        n_fft, hop = self.cfg.istft_n_fft, self.cfg.istft_hop_len
        spec = torch.stft(signal, n_fft, hop, n_fft, window=self.stft_window.to(signal.dtype), return_complex=True)
        return torch.cat([spec.real, spec.imag], dim=1)

    def _istft(self, magnitude: torch.Tensor, phase: torch.Tensor) -> torch.Tensor:
        n_fft, hop = self.cfg.istft_n_fft, self.cfg.istft_hop_len
        magnitude = magnitude.float().clamp(max=1e2)
        spec = torch.polar(magnitude, phase.float())
        return istft(spec, n_fft, hop, self.stft_window.float())


def istft(spec: torch.Tensor, n_fft: int, hop: int, window: torch.Tensor) -> torch.Tensor:
    """`torch.istft(spec, n_fft, hop, n_fft, window)` (centred, one-sided) without its host-side check of the
    window envelope (a device-to-host sync, which a CUDA graph cannot capture): spec [B, n_fft / 2 + 1, N]
    complex -> [B, (N - 1) * hop] float. The envelope of a Hann window at hop <= n_fft / 2 has no zero."""
    frames = torch.fft.irfft(spec, n=n_fft, dim=1) * window[None, :, None]  # [B, n_fft, N]
    length = (spec.shape[-1] - 1) * hop + n_fft
    fold = dict(output_size=(1, length), kernel_size=(1, n_fft), stride=(1, hop))
    signal = F.fold(frames, **fold)[:, 0, 0]  # overlap-add: [B, length]
    squares = (window ** 2)[None, :, None].expand(1, n_fft, spec.shape[-1])
    envelope = F.fold(squares, **fold)[:, 0, 0]
    half = n_fft // 2
    return signal[:, half:length - half] / envelope[:, half:length - half]


def fold_weight_norm(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A state dict with weight norm (parametrizations' original0/original1, or weight_g/weight_v) as plain
    `weight`s: weight = g * v / ||v||, the norm over every dim but 0."""
    out: dict[str, torch.Tensor] = {}
    pairs = {".parametrizations.weight.original0": ".parametrizations.weight.original1", ".weight_g": ".weight_v"}
    for key, value in state.items():
        for g_suffix, v_suffix in pairs.items():
            if key.endswith(g_suffix):
                prefix = key[: -len(g_suffix)]
                v = state[prefix + v_suffix].float()
                norm = v.flatten(1).norm(dim=1).view(-1, *[1] * (v.dim() - 1))
                out[prefix + ".weight"] = (value.float() * v / norm).to(value.dtype)
                break
        else:
            if not any(key.endswith(v_suffix) for v_suffix in pairs.values()):
                out[key] = value
    return out
