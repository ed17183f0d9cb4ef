"""CAM++, the speaker encoder CosyVoice ships as campplus.onnx: 80-bin fbank -> a 192-d speaker embedding.

Our own implementation of 3D-Speaker's `CAMPPlus` (modelscope/3D-Speaker, speakerlab/models/campplus/DTDNN.py
and layers.py): an FCM head (2-D residual convs over frequency x time), a TDNN layer that halves time, densely
connected TDNN blocks whose layers gate a local conv with context-aware masking (the utterance's mean plus its
segment means), transit layers that halve the channels, statistics pooling (mean and unbiased std over time)
and a dense layer to the embedding, ending in a BatchNorm without affine. Module and tensor names are
3D-Speaker's, so the official state dict loads as it is (campplus_onnx.py reads it out of campplus.onnx).

Batched over variable lengths: rows are right-padded, and every op that mixes frames (a conv wider than one
frame, a mean, the segment and statistics pooling) sees a row's padding as zeros or not at all. The convs pad
with zeros, so a row gives what it gives alone.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn
from protocol.settings import read_settings

TDNN_KERNEL_SIZE, TDNN_STRIDE = 5, 2  # the layer between the head and the blocks halves time
HEAD_DOWNSAMPLING = 8  # the head's three stride-2 convs over frequency
CAM_REDUCTION = 2  # context-aware masking's bottleneck: bn_channels // 2


@dataclass(frozen=True)
class CampPlusConfig:
    """CAM++'s shape; `full()` is CosyVoice's campplus.onnx (3D-Speaker's speech_campplus_sv_zh-cn_16k-common)."""

    feat_dim: int = 80  # fbank bins
    embedding_size: int = 192
    head_channels: int = 32  # the FCM head's channels (3D-Speaker's m_channels)
    head_blocks: int = 2  # residual blocks in each of the head's two layers
    init_channels: int = 128  # the TDNN layer's output channels
    growth_rate: int = 32  # channels each dense layer adds
    bn_size: int = 4  # a dense layer's bottleneck has bn_size * growth_rate channels
    block_layers: tuple[int, ...] = (12, 24, 16)
    block_kernel_sizes: tuple[int, ...] = (3, 3, 3)
    block_dilations: tuple[int, ...] = (1, 2, 2)
    segment_frames: int = 100  # context-aware masking's segment, in frames after the TDNN layer (20 ms each)
    sample_rate: int = 16000  # of the audio the fbank front end takes

    def __post_init__(self) -> None:
        counts = (self.feat_dim, self.embedding_size, self.head_channels, self.head_blocks, self.init_channels,
                  self.growth_rate, self.bn_size, self.segment_frames, self.sample_rate)
        if min(counts) < 1 or min(self.block_layers + self.block_dilations, default=0) < 1:
            raise ValueError(f"CAM++ sizes must be >= 1: {self}")
        if self.feat_dim % HEAD_DOWNSAMPLING:
            raise ValueError(f"feat_dim must be a multiple of {HEAD_DOWNSAMPLING}, got {self.feat_dim}")
        if not self.block_layers or not len(self.block_layers) == len(self.block_kernel_sizes) == len(
                self.block_dilations):
            raise ValueError(f"need one kernel size and one dilation per block: {self}")
        if any(k < 1 or k % 2 == 0 for k in self.block_kernel_sizes):
            raise ValueError(f"block kernel sizes must be odd (equal padding), got {self.block_kernel_sizes}")
        if self.bottleneck_channels % CAM_REDUCTION:
            raise ValueError(f"bn_size * growth_rate must be even, got {self.bottleneck_channels}")

    @property
    def bottleneck_channels(self) -> int:
        return self.bn_size * self.growth_rate

    @classmethod
    def full(cls) -> "CampPlusConfig":
        return cls()

    @classmethod
    def tiny(cls) -> "CampPlusConfig":
        """A few thousand parameters for tests; short segments, so a second of audio spans several."""
        return cls(head_channels=4, head_blocks=1, init_channels=16, growth_rate=4, bn_size=2,
                   block_layers=(2, 2, 2), segment_frames=8)

    def to_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: dict) -> "CampPlusConfig":
        return read_settings(cls, data, what="CAM++ config")


def frame_mask(lengths: torch.Tensor, num_frames: int, dtype: torch.dtype) -> torch.Tensor:
    """lengths: [B] int64 -> [B, 1, num_frames]: 1 on each row's frames, 0 on its padding."""
    frames = torch.arange(num_frames, device=lengths.device)
    return (frames < lengths[:, None]).to(dtype)[:, None]


def segment_means(x: torch.Tensor, mask: torch.Tensor, segment_frames: int) -> torch.Tensor:
    """x: [B, C, T] (zero past each row's length) -> each frame's segment mean [B, C, T]; a row's last segment
    averages the frames it has (3D-Speaker: avg_pool1d with ceil_mode, spread back over the segment)."""
    num_frames = x.shape[-1]
    num_segments = -(-num_frames // segment_frames)
    pad = num_segments * segment_frames - num_frames
    sums = F.pad(x, (0, pad)).unflatten(-1, (num_segments, segment_frames)).sum(-1)  # [B, C, S]
    counts = F.pad(mask, (0, pad)).unflatten(-1, (num_segments, segment_frames)).sum(-1)  # [B, 1, S]
    means = sums / counts.clamp(min=1)
    return means.repeat_interleave(segment_frames, dim=-1)[..., :num_frames]


def statistics_pooling(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """x: [B, C, T] -> [B, 2C]: the mean and the unbiased std over each row's frames (it needs two or more)."""
    count = mask.sum(-1)  # [B, 1]
    mean = (x * mask).sum(-1) / count
    variance = ((x - mean[..., None]) * mask).pow(2).sum(-1) / (count - 1)
    return torch.cat([mean, variance.sqrt()], dim=-1)


class Nonlinear(nn.Module):
    """3D-Speaker's `get_nonlinear("batchnorm-relu")` (ReLU after a BatchNorm1d), or "batchnorm_" (no affine,
    no ReLU) that ends the network."""

    def __init__(self, channels: int, relu: bool = True, affine: bool = True) -> None:
        super().__init__()
        self.batchnorm = nn.BatchNorm1d(channels, affine=affine)
        self.relu = relu

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.batchnorm(x)
        return F.relu(x) if self.relu else x


class BasicResBlock(nn.Module):
    """x: [B, C, F, T] -> [B, C, F / stride, T] (the stride is over frequency only)."""

    def __init__(self, in_planes: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=(stride, 1), padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(nn.Conv2d(in_planes, planes, 1, stride=(stride, 1), bias=False),
                                          nn.BatchNorm2d(planes))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x * mask)))
        out = self.bn2(self.conv2(out * mask))
        return F.relu(out + self.shortcut(x))  # the 1x1 shortcut mixes no frames


class FCM(nn.Module):
    """The head: fbank [B, F, T] -> [B, head_channels * F / 8, T]."""

    def __init__(self, cfg: CampPlusConfig) -> None:
        super().__init__()
        channels = cfg.head_channels
        self.conv1 = nn.Conv2d(1, channels, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.layer1 = nn.Sequential(*[BasicResBlock(channels, channels, 2 if i == 0 else 1)
                                      for i in range(cfg.head_blocks)])
        self.layer2 = nn.Sequential(*[BasicResBlock(channels, channels, 2 if i == 0 else 1)
                                      for i in range(cfg.head_blocks)])
        self.conv2 = nn.Conv2d(channels, channels, 3, stride=(2, 1), padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.out_channels = channels * (cfg.feat_dim // HEAD_DOWNSAMPLING)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        mask = mask[:, :, None]  # [B, 1, 1, T]
        out = F.relu(self.bn1(self.conv1(x[:, None] * mask)))
        for block in (*self.layer1, *self.layer2):
            out = block(out, mask)
        out = F.relu(self.bn2(self.conv2(out * mask)))
        return out.flatten(1, 2)


class TDNNLayer(nn.Module):
    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.linear = nn.Conv1d(in_channels, out_channels, TDNN_KERNEL_SIZE, stride=TDNN_STRIDE,
                                padding=TDNN_KERNEL_SIZE // 2, bias=False)
        self.nonlinear = Nonlinear(out_channels)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.nonlinear(self.linear(x * mask))

    @staticmethod
    def output_lengths(lengths: torch.Tensor) -> torch.Tensor:
        return (lengths - 1) // TDNN_STRIDE + 1  # with padding kernel // 2 each side


class CAMLayer(nn.Module):
    """A local conv gated per channel by context: the utterance's mean plus the frame's segment mean."""

    def __init__(self, cfg: CampPlusConfig, kernel_size: int, dilation: int) -> None:
        super().__init__()
        channels = cfg.bottleneck_channels
        self.linear_local = nn.Conv1d(channels, cfg.growth_rate, kernel_size, padding=kernel_size // 2 * dilation,
                                      dilation=dilation, bias=False)
        self.linear1 = nn.Conv1d(channels, channels // CAM_REDUCTION, 1)
        self.linear2 = nn.Conv1d(channels // CAM_REDUCTION, cfg.growth_rate, 1)
        self.segment_frames = cfg.segment_frames

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = x * mask
        mean = x.sum(-1, keepdim=True) / mask.sum(-1, keepdim=True)
        context = mean + segment_means(x, mask, self.segment_frames)
        gate = torch.sigmoid(self.linear2(F.relu(self.linear1(context))))
        return self.linear_local(x) * gate


class CAMDenseTDNNLayer(nn.Module):
    """[B, C, T] -> the growth_rate channels it adds: BN-ReLU, 1x1 bottleneck, BN-ReLU, CAM layer."""

    def __init__(self, in_channels: int, cfg: CampPlusConfig, kernel_size: int, dilation: int) -> None:
        super().__init__()
        self.nonlinear1 = Nonlinear(in_channels)
        self.linear1 = nn.Conv1d(in_channels, cfg.bottleneck_channels, 1, bias=False)
        self.nonlinear2 = Nonlinear(cfg.bottleneck_channels)
        self.cam_layer = CAMLayer(cfg, kernel_size, dilation)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.cam_layer(self.nonlinear2(self.linear1(self.nonlinear1(x))), mask)


class CAMDenseTDNNBlock(nn.Module):
    """Dense connectivity: each layer's output is concatenated to its input (`tdnnd1`, `tdnnd2`, ...)."""

    def __init__(self, num_layers: int, in_channels: int, cfg: CampPlusConfig, kernel_size: int,
                 dilation: int) -> None:
        super().__init__()
        for i in range(num_layers):
            self.add_module(f"tdnnd{i + 1}", CAMDenseTDNNLayer(in_channels + i * cfg.growth_rate, cfg, kernel_size,
                                                               dilation))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        for layer in self.children():
            x = torch.cat([x, layer(x, mask)], dim=1)
        return x


class TransitLayer(nn.Module):
    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.nonlinear = Nonlinear(in_channels)
        self.linear = nn.Conv1d(in_channels, out_channels, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.nonlinear(x))


class DenseLayer(nn.Module):
    """Pooled statistics [B, 2C] -> the embedding [B, embedding_size] (a 1x1 conv, then a BatchNorm, no affine)."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.linear = nn.Conv1d(in_channels, out_channels, 1, bias=False)
        self.nonlinear = Nonlinear(out_channels, relu=False, affine=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.nonlinear(self.linear(x[..., None])[..., 0])


class XVector(nn.Module):
    """The head's features [B, C, T] -> the embedding: TDNN, (block, transit) per block, pooling, dense."""

    def __init__(self, cfg: CampPlusConfig, in_channels: int) -> None:
        super().__init__()
        self.tdnn = TDNNLayer(in_channels, cfg.init_channels)
        channels = cfg.init_channels
        blocks = zip(cfg.block_layers, cfg.block_kernel_sizes, cfg.block_dilations)
        for i, (num_layers, kernel_size, dilation) in enumerate(blocks, start=1):
            self.add_module(f"block{i}", CAMDenseTDNNBlock(num_layers, channels, cfg, kernel_size, dilation))
            channels += num_layers * cfg.growth_rate
            self.add_module(f"transit{i}", TransitLayer(channels, channels // 2))
            channels //= 2
        self.num_blocks = len(cfg.block_layers)
        self.out_nonlinear = Nonlinear(channels)
        self.dense = DenseLayer(channels * 2, cfg.embedding_size)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        x = self.tdnn(x, frame_mask(lengths, x.shape[-1], x.dtype))
        mask = frame_mask(TDNNLayer.output_lengths(lengths), x.shape[-1], x.dtype)
        for i in range(1, self.num_blocks + 1):
            x = getattr(self, f"transit{i}")(getattr(self, f"block{i}")(x, mask))
        return self.dense(statistics_pooling(self.out_nonlinear(x), mask))


class CampPlus(nn.Module):
    """fbank [B, T, feat_dim] (right-padded) and lengths [B] (frames, >= 3) -> embeddings [B, embedding_size]."""

    def __init__(self, cfg: CampPlusConfig) -> None:
        super().__init__()
        self.head = FCM(cfg)
        self.xvector = XVector(cfg, self.head.out_channels)

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        x = feats.transpose(1, 2)  # [B, feat_dim, T]
        return self.xvector(self.head(x, frame_mask(lengths, x.shape[-1], x.dtype)), lengths)
