"""The 12 Hz codec's encoder (speech tokenizer `encoder.*`): 24 kHz mono audio -> frames of 16 codes.

Our own implementation of the reference `Qwen3TTSTokenizerV2Model.encode` (qwen-tts 0.1.1), which runs
a Mimi encoder (transformers 4.57 `MimiModel.encode`): a causal SEANet conv encoder (25 Hz), a causal
sliding-window transformer, a stride-2 conv to 12.5 Hz, then split residual vector quantisation (one
semantic codebook, then the acoustic ones on the same input). Of its quantizers the first
`encoder_valid_num_quantizers` (16) are kept, one frame per 1920 samples, rounded up. Config fields
and module names are the official `encoder_config` (a MimiConfig) and checkpoint keys, so a real
speech tokenizer loads; transformers 5's MimiConfig cannot read that config (it lacks `rope_theta`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .codec_transformer import apply_rotary, rotary_cos_sin, sliding_window_mask

CODEBOOK_EPS = 1e-5  # the reference's floor on a codebook entry's usage count


@dataclass(frozen=True)
class CodecEncoderConfig:
    """The official `encoder_config` fields we use (MimiConfig names and defaults), plus
    `valid_num_quantizers`, the top-level `encoder_valid_num_quantizers`."""

    sampling_rate: int = 24000
    audio_channels: int = 1
    hidden_size: int = 512
    num_filters: int = 64
    num_residual_layers: int = 1
    upsampling_ratios: tuple[int, ...] = (8, 6, 5, 4)
    kernel_size: int = 7
    last_kernel_size: int = 3
    residual_kernel_size: int = 3
    dilation_growth_rate: int = 2
    compress: int = 2
    use_causal_conv: bool = True
    use_conv_shortcut: bool = False
    pad_mode: str = "constant"
    num_hidden_layers: int = 8
    num_attention_heads: int = 8
    num_key_value_heads: int = 8
    head_dim: int = 64
    intermediate_size: int = 2048
    hidden_act: str = "gelu"
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    sliding_window: int = 250
    layer_scale_initial_scale: float = 0.01
    attention_bias: bool = False
    codebook_size: int = 2048
    codebook_dim: int = 256
    vector_quantization_hidden_dimension: int = 256
    num_quantizers: int = 32
    num_semantic_quantizers: int = 1
    frame_rate: float = 12.5
    valid_num_quantizers: int = 16

    def __post_init__(self) -> None:
        object.__setattr__(self, "upsampling_ratios", tuple(self.upsampling_ratios))
        if not (self.use_causal_conv and self.hidden_act == "gelu" and self.audio_channels == 1):
            raise ValueError("only the causal, gelu, mono Mimi encoder is implemented")
        if self.use_conv_shortcut or self.pad_mode != "constant":
            raise ValueError("only use_conv_shortcut=False and pad_mode='constant' are implemented")
        if not self.num_semantic_quantizers < self.valid_num_quantizers <= self.num_quantizers:
            raise ValueError(f"valid_num_quantizers {self.valid_num_quantizers} must be within "
                             f"({self.num_semantic_quantizers}, {self.num_quantizers}]")
        if self.downsample_stride != 2:
            raise ValueError(f"the encoder's rate {self.encoder_frame_rate} must be twice frame_rate {self.frame_rate}")

    @property
    def encoder_frame_rate(self) -> float:
        return math.ceil(self.sampling_rate / math.prod(self.upsampling_ratios))

    @property
    def downsample_stride(self) -> int:
        return int(self.encoder_frame_rate / self.frame_rate)

    @property
    def samples_per_frame(self) -> int:
        return math.prod(self.upsampling_ratios) * self.downsample_stride

    @classmethod
    def from_official(cls, config: dict[str, Any]) -> "CodecEncoderConfig":
        """From a speech tokenizer `config.json` (top level); unknown keys are ignored."""
        encoder = dict(config["encoder_config"])
        encoder["frame_rate"] = encoder.get("_frame_rate") or encoder.get("frame_rate") or cls.frame_rate
        known = {f.name for f in fields(cls)} - {"valid_num_quantizers"}
        return cls(**{k: v for k, v in encoder.items() if k in known},
                   valid_num_quantizers=config.get("encoder_valid_num_quantizers", cls.valid_num_quantizers))

    def to_official(self) -> dict[str, Any]:
        """The `encoder_config` entry (MimiConfig names)."""
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("valid_num_quantizers", "frame_rate")}
        return {**d, "upsampling_ratios": list(self.upsampling_ratios), "_frame_rate": self.frame_rate,
                "upsample_groups": self.hidden_size, "model_type": "mimi"}  # groups: Mimi's (unused) decoder side


def tiny_codec_encoder_config() -> CodecEncoderConfig:
    """A few-thousand-parameter encoder of the real topology: the tiny codec's 4 codebooks of 64 codes."""
    return CodecEncoderConfig(hidden_size=16, num_filters=4, num_hidden_layers=1, num_attention_heads=2,
                              num_key_value_heads=2, head_dim=8, intermediate_size=16, codebook_size=64,
                              codebook_dim=8, vector_quantization_hidden_dimension=8, num_quantizers=8,
                              valid_num_quantizers=4)


# ---------------------------------------------------------------- SEANet conv encoder


class CausalConv1d(nn.Module):
    """MimiConv1d, causal: left padding kernel - stride, and right padding so the last window is whole."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, dilation: int = 1,
                 bias: bool = True, pad_mode: str = "constant") -> None:
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, stride, dilation=dilation, bias=bias)
        self.stride, self.pad_mode = stride, pad_mode
        self.effective_kernel = (kernel_size - 1) * dilation + 1
        self.left_pad = self.effective_kernel - stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [B, C_in, T] -> [B, C_out, ceil(T / stride)]
        length = x.shape[-1]
        num_frames = math.ceil((length - self.effective_kernel + self.left_pad) / self.stride + 1) - 1
        right_pad = num_frames * self.stride + self.effective_kernel - self.left_pad - length
        return self.conv(F.pad(x, (self.left_pad, right_pad), mode=self.pad_mode))


class ResnetBlock(nn.Module):
    """`block`: [ELU, conv k (dilated), ELU, conv 1], added to the input (no shortcut conv)."""

    def __init__(self, cfg: CodecEncoderConfig, dim: int, dilation: int) -> None:
        super().__init__()
        hidden = dim // cfg.compress
        self.block = nn.ModuleList([nn.ELU(), CausalConv1d(dim, hidden, cfg.residual_kernel_size, dilation=dilation),
                                    nn.ELU(), CausalConv1d(hidden, dim, 1)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x
        for layer in self.block:
            h = layer(h)
        return x + h


class SeanetEncoder(nn.Module):
    """`encoder.encoder`: audio [B, 1, N] -> [B, hidden, N / prod(upsampling_ratios)]."""

    def __init__(self, cfg: CodecEncoderConfig) -> None:
        super().__init__()
        layers: list[nn.Module] = [CausalConv1d(cfg.audio_channels, cfg.num_filters, cfg.kernel_size)]
        dim = cfg.num_filters
        for ratio in reversed(cfg.upsampling_ratios):
            layers += [ResnetBlock(cfg, dim, cfg.dilation_growth_rate ** j) for j in range(cfg.num_residual_layers)]
            layers += [nn.ELU(), CausalConv1d(dim, dim * 2, kernel_size=ratio * 2, stride=ratio)]
            dim *= 2
        layers += [nn.ELU(), CausalConv1d(dim, cfg.hidden_size, cfg.last_kernel_size)]
        self.layers = nn.ModuleList(layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


# ---------------------------------------------------------------- transformer


class Attention(nn.Module):
    def __init__(self, cfg: CodecEncoderConfig) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        bias = cfg.attention_bias
        self.q_proj = nn.Linear(cfg.hidden_size, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(cfg.hidden_size, self.num_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(cfg.hidden_size, self.num_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, cfg.hidden_size, bias=bias)

    def _heads(self, x: torch.Tensor, num_heads: int) -> torch.Tensor:
        return x.view(x.shape[0], x.shape[1], num_heads, self.head_dim).transpose(1, 2)  # [B, H, T, D]

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], mask: torch.Tensor) -> torch.Tensor:
        q = apply_rotary(self._heads(self.q_proj(x), self.num_heads), *rope)
        k = apply_rotary(self._heads(self.k_proj(x), self.num_kv_heads), *rope)
        v = self._heads(self.v_proj(x), self.num_kv_heads)
        repeat = self.num_heads // self.num_kv_heads
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.o_proj(out.transpose(1, 2).reshape(x.shape[0], x.shape[1], -1))


class Mlp(nn.Module):
    def __init__(self, cfg: CodecEncoderConfig) -> None:
        super().__init__()
        self.fc1 = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.fc2 = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class LayerScale(nn.Module):
    def __init__(self, cfg: CodecEncoderConfig) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.full((cfg.hidden_size,), cfg.layer_scale_initial_scale))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * x


class TransformerLayer(nn.Module):
    def __init__(self, cfg: CodecEncoderConfig) -> None:
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = Mlp(cfg)
        self.input_layernorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_eps)
        self.post_attention_layernorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_eps)
        self.self_attn_layer_scale = LayerScale(cfg)
        self.mlp_layer_scale = LayerScale(cfg)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], mask: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn_layer_scale(self.self_attn(self.input_layernorm(x), rope, mask))
        return x + self.mlp_layer_scale(self.mlp(self.post_attention_layernorm(x)))


class EncoderTransformer(nn.Module):
    """`encoder.encoder_transformer`: causal, each frame sees itself and `sliding_window - 1` frames back."""

    def __init__(self, cfg: CodecEncoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.layers = nn.ModuleList(TransformerLayer(cfg) for _ in range(cfg.num_hidden_layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [B, T, hidden] -> [B, T, hidden] (no final norm)
        steps = torch.arange(x.shape[1], device=x.device)
        rope = rotary_cos_sin(steps, self.cfg.head_dim, self.cfg.rope_theta, x.dtype)
        mask = sliding_window_mask(x.shape[1], self.cfg.sliding_window, x.device)
        for layer in self.layers:
            x = layer(x, rope, mask)
        return x


# ---------------------------------------------------------------- quantizer


class EuclideanCodebook(nn.Module):
    """Centroids kept as running sums (`embed_sum`) and usage counts (`cluster_usage`)."""

    def __init__(self, cfg: CodecEncoderConfig) -> None:
        super().__init__()
        self.register_buffer("initialized", torch.ones(1))
        self.register_buffer("cluster_usage", torch.ones(cfg.codebook_size))
        self.register_buffer("embed_sum", torch.zeros(cfg.codebook_size, cfg.codebook_dim))

    @property
    def embed(self) -> torch.Tensor:
        return self.embed_sum / self.cluster_usage.clamp(min=CODEBOOK_EPS)[:, None]  # [codebook_size, dim]

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x: [B, T, dim] -> (nearest centroid ids [B, T], their centroids [B, T, dim])."""
        embed = self.embed
        ids = torch.cdist(x.reshape(-1, x.shape[-1])[None].float(), embed[None].float(), p=2)[0].argmin(dim=-1)
        ids = ids.view(x.shape[:-1])
        return ids, F.embedding(ids, embed)


class VectorQuantization(nn.Module):
    def __init__(self, cfg: CodecEncoderConfig) -> None:
        super().__init__()
        self.codebook = EuclideanCodebook(cfg)


class ResidualVectorQuantizer(nn.Module):
    """Each layer quantises what the layers before it left over."""

    def __init__(self, cfg: CodecEncoderConfig, num_quantizers: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(VectorQuantization(cfg) for _ in range(num_quantizers))
        self.input_proj = (nn.Conv1d(cfg.hidden_size, cfg.vector_quantization_hidden_dimension, 1, bias=False)
                           if cfg.vector_quantization_hidden_dimension != cfg.hidden_size else None)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """x: [B, hidden, T] -> codes [B, T, num_quantizers]."""
        residual = (self.input_proj(x) if self.input_proj is not None else x).transpose(1, 2)
        codes = []
        for layer in self.layers:
            ids, quantized = layer.codebook.encode(residual)
            residual = residual - quantized
            codes.append(ids)
        return torch.stack(codes, dim=-1)


class SplitResidualVectorQuantizer(nn.Module):
    """Semantic and acoustic quantizers on the same input; only the codebooks kept are built."""

    def __init__(self, cfg: CodecEncoderConfig) -> None:
        super().__init__()
        self.semantic_residual_vector_quantizer = ResidualVectorQuantizer(cfg, cfg.num_semantic_quantizers)
        num_acoustic = cfg.valid_num_quantizers - cfg.num_semantic_quantizers
        self.acoustic_residual_vector_quantizer = ResidualVectorQuantizer(cfg, num_acoustic)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat((self.semantic_residual_vector_quantizer.encode(x),
                          self.acoustic_residual_vector_quantizer.encode(x)), dim=-1)


class CodecEncoder(nn.Module):
    """`encoder`: audio [B, N] float -> codes [B, ceil(N / samples_per_frame), valid_num_quantizers] int64."""

    def __init__(self, cfg: CodecEncoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.encoder = SeanetEncoder(cfg)
        self.encoder_transformer = EncoderTransformer(cfg)
        stride = cfg.downsample_stride
        self.downsample = CausalConv1d(cfg.hidden_size, cfg.hidden_size, kernel_size=2 * stride, stride=stride,
                                       bias=False, pad_mode="replicate")
        self.quantizer = SplitResidualVectorQuantizer(cfg)

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        x = self.encoder(audio[:, None])  # [B, hidden, T25]
        x = self.encoder_transformer(x.transpose(1, 2)).transpose(1, 2)
        codes = self.quantizer.encode(self.downsample(x).float())  # [B, T12, K]; codebooks in float32
        return codes[:, :-(-audio.shape[-1] // self.cfg.samples_per_frame)]
