"""The Voxtral codec's decoder (`audio_tokenizer` in the checkpoint): one frame of 37 codes -> 1920 samples at
24 kHz (12.5 frames per second).

The latent of a frame is [semantic VQ embedding (256) ; the 36 FSQ values q / 10 - 1] (292 channels); a causal
conv (kernel 3, replicate padding) lifts it to `dim`; four transformer stages alternate with causal transposed
convs (stride 2, the k - s extra samples cut on the right); a causal conv (kernel 7, reflect padding) makes 240
samples per step, laid out step by step. Convs and transposed convs are weight-normed (folded at load) and have no
bias. A transformer block is pre-norm (RMSNorm eps 0.01) with per-channel layer scales; its attention has q/k
RMSNorm over all heads, ALiBi (slope 2^(-8h/H) for head h), and is causal over a sliding window of w keys before
the query (w + 1 in all): 2, 4, 8, 16 steps in the four stages. As vllm-omni's `VoxtralTTSAudioTokenizer` decodes.

Causal throughout, with a finite reach back: a window with `LEFT_CONTEXT_FRAMES` frames before a chunk gives the
chunk's samples of a whole decode (the first conv's replicate padding and the last one's reflect padding only
touch samples inside the reach; pinned by tests).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrize

from ..base import Codec, CodecShape
from ..layers.random_init import init_random_weights
from .config import CodecConfig
from .flow_head import FeedForward

LEFT_CONTEXT_FRAMES = 25  # vllm-omni's streaming context (`codec_left_context_frames`); the reach is shorter
RANDOM_OUTPUT_GAIN = 0.5  # random weights: the last conv's gain, so a random decode stays mostly inside [-1, 1]
weight_norm = nn.utils.parametrizations.weight_norm


class CausalConv(nn.Module):
    """Left-padded conv (`conv` weight-normed in the checkpoint); stride 1 here, as every decoder conv."""

    def __init__(self, channels_in: int, channels_out: int, kernel: int, pad_mode: str) -> None:
        super().__init__()
        self.conv = weight_norm(nn.Conv1d(channels_in, channels_out, kernel, bias=False))
        self.pad, self.pad_mode = kernel - 1, pad_mode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, C, T] -> [B, C', T]."""
        if self.pad_mode == "reflect" and x.shape[-1] <= self.pad:  # reflect needs more samples than the pad
            extra = self.pad - x.shape[-1] + 1
            return self.conv(F.pad(F.pad(x, (0, extra)), (self.pad, 0), mode="reflect")[..., :-extra])
        return self.conv(F.pad(x, (self.pad, 0), mode=self.pad_mode))


class CausalConvTranspose(nn.Module):
    def __init__(self, channels: int, kernel: int, stride: int) -> None:
        super().__init__()
        self.conv = weight_norm(nn.ConvTranspose1d(channels, channels, kernel, stride=stride, bias=False))
        self.trim = kernel - stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv(x)
        return out[..., : out.shape[-1] - self.trim]


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """[H]: r^h with r = 2^(-8/H) (a power-of-two H; the reference interleaves otherwise)."""
    if not math.log2(num_heads).is_integer():
        base = 2 ** math.floor(math.log2(num_heads))
        return torch.cat((alibi_slopes(base), alibi_slopes(2 * base)[::2][: num_heads - base]))
    ratio = 2.0 ** (-8.0 / num_heads)
    return torch.tensor([ratio ** h for h in range(num_heads)])


class CodecAttention(nn.Module):
    def __init__(self, c: CodecConfig, window: int) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim, self.window = c.n_heads, c.n_kv_heads, c.head_dim, window
        self.wq = nn.Linear(c.dim, c.n_heads * c.head_dim, bias=False)
        self.wk = nn.Linear(c.dim, c.n_kv_heads * c.head_dim, bias=False)
        self.wv = nn.Linear(c.dim, c.n_kv_heads * c.head_dim, bias=False)
        self.wo = nn.Linear(c.n_heads * c.head_dim, c.dim, bias=False)
        self.q_norm = nn.RMSNorm(c.n_heads * c.head_dim, eps=c.qk_norm_eps)
        self.k_norm = nn.RMSNorm(c.n_kv_heads * c.head_dim, eps=c.qk_norm_eps)
        self.register_buffer("slopes", alibi_slopes(c.n_heads), persistent=False)

    def bias(self, length: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """[H, T, T]: slope · (j - i) for i - window <= j <= i, -inf elsewhere."""
        positions = torch.arange(length, device=device)
        relative = positions[None, :] - positions[:, None]  # j - i
        bias = self.slopes.to(device=device, dtype=dtype)[:, None, None] * relative.to(dtype)
        return bias.masked_fill(((relative > 0) | (relative < -self.window))[None], float("-inf"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        q = self.q_norm(self.wq(x)).view(batch, length, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_norm(self.wk(x)).view(batch, length, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(batch, length, self.n_kv_heads, self.head_dim).transpose(1, 2)
        repeats = self.n_heads // self.n_kv_heads
        k, v = k.repeat_interleave(repeats, dim=1), v.repeat_interleave(repeats, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=self.bias(length, q.dtype, x.device)[None])
        return self.wo(out.transpose(1, 2).reshape(batch, length, -1))


class CodecBlock(nn.Module):
    def __init__(self, c: CodecConfig, window: int) -> None:
        super().__init__()
        self.attention = CodecAttention(c, window)
        self.feed_forward = FeedForward(c.dim, c.hidden_dim)
        self.attention_norm = nn.RMSNorm(c.dim, eps=c.norm_eps)
        self.ffn_norm = nn.RMSNorm(c.dim, eps=c.norm_eps)
        self.attention_scale = nn.Parameter(torch.full((c.dim,), c.layer_scale_init))
        self.ffn_scale = nn.Parameter(torch.full((c.dim,), c.layer_scale_init))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.attention_scale * self.attention(self.attention_norm(x))
        return h + self.ffn_scale * self.feed_forward(self.ffn_norm(h))


class CodecStage(nn.Module):
    def __init__(self, c: CodecConfig, num_layers: int, window: int) -> None:
        super().__init__()
        self.layers = nn.ModuleDict({str(i): CodecBlock(c, window) for i in range(num_layers)})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers.values():
            x = layer(x)
        return x


class SemanticCodebook(nn.Module):
    """`quantizer.semantic_codebook`: the embedding is `embedding_sum / cluster_usage` (an EMA VQ's buffers)."""

    def __init__(self, size: int, dim: int) -> None:
        super().__init__()
        self.register_buffer("cluster_usage", torch.ones(size))
        self.register_buffer("embedding_sum", torch.zeros(size, dim))

    def embedding(self) -> torch.Tensor:
        return self.embedding_sum / self.cluster_usage.clamp(min=1e-5)[:, None]


class Quantizer(nn.Module):
    def __init__(self, c: CodecConfig) -> None:
        super().__init__()
        self.semantic_codebook = SemanticCodebook(c.semantic_codebook_size, c.semantic_dim)
        self.levels = c.acoustic_codebook_size


class VoxtralCodec(Codec):
    """Parameters carry the checkpoint's names under `audio_tokenizer.` (its encoder is not loaded: the public
    checkpoint has none)."""

    supports_cuda_graphs = True  # static shapes per call, no host reads

    def __init__(self, config: CodecConfig) -> None:
        super().__init__()
        self.config = config
        self.shape = CodecShape(1 + config.acoustic_dim, config.semantic_codebook_size, config.sampling_rate,
                                config.samples_per_frame, LEFT_CONTEXT_FRAMES)
        windows, kernels, strides = config.decoder_windows(), config.decoder_kernels, config.decoder_strides
        blocks: list[nn.Module] = [CausalConv(config.latent_dim, config.dim, kernels[0], "replicate")]
        for stage, num_layers in enumerate(config.decoder_lengths):
            blocks.append(CodecStage(config, num_layers, windows[stage]))
            if stage + 1 < len(kernels):
                blocks.append(CausalConvTranspose(config.dim, kernels[stage + 1], strides[stage + 1]))
        if strides[0] != 1:
            raise ValueError("the decoder's first conv must have stride 1")
        self.decoder_blocks = nn.ModuleList(blocks)
        self.quantizer = Quantizer(config)
        self.output_proj = CausalConv(config.dim, config.pretransform_patch_size, config.patch_proj_kernel_size,
                                      "reflect")

    @classmethod
    def from_state(cls, config: CodecConfig, state: dict[str, torch.Tensor], device="cpu") -> "VoxtralCodec":
        """From the checkpoint's `audio_tokenizer.*` tensors (the prefix removed; encoder tensors ignored)."""
        codec = cls(config)
        wanted = set(codec.state_dict())
        codec.load_state_dict({k: v for k, v in state.items() if k in wanted}, strict=True)
        return codec.to(device).fold_weight_norm().eval()

    @classmethod
    def from_config(cls, config: CodecConfig, device="cpu", seed: int = 0) -> "VoxtralCodec":
        """Random weights; the VQ's embedding drawn N(0, 1) (its buffers: usage 1, sum = the embedding)."""
        codec = cls(config).to(device)
        init_random_weights(codec, seed, matrices=())
        generator = torch.Generator(device=device).manual_seed(seed + 1)
        with torch.no_grad():
            for module in codec.modules():
                if isinstance(module, (nn.Conv1d, nn.ConvTranspose1d)):  # the parametrized `weight` is a view
                    fan_in = module.in_channels * module.kernel_size[0]
                    module.parametrizations.weight.original1.normal_(0.0, 1.0, generator=generator)
                    norms = module.parametrizations.weight.original1.flatten(1).norm(dim=1)
                    shape = (-1,) + (1,) * (module.parametrizations.weight.original1.dim() - 1)
                    module.parametrizations.weight.original0.copy_(norms.view(shape) * fan_in ** -0.5)
            codec.quantizer.semantic_codebook.embedding_sum.normal_(0.0, 1.0, generator=generator)
            codec.output_proj.conv.parametrizations.weight.original0.mul_(RANDOM_OUTPUT_GAIN)
        return codec.eval()

    def fold_weight_norm(self) -> "VoxtralCodec":
        for module in self.modules():
            if parametrize.is_parametrized(module, "weight"):
                parametrize.remove_parametrizations(module, "weight", leave_parametrized=True)
        return self

    def latent(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, T, 37] int64 (unshifted) -> [B, 292, T]: the VQ embedding, then the FSQ values."""
        c = self.config
        semantic = codes[..., 0].clamp(0, c.semantic_codebook_size - 1)
        embedding = self.quantizer.semantic_codebook.embedding()
        acoustic = codes[..., 1:].clamp(0, c.acoustic_codebook_size - 1).to(embedding.dtype)
        values = acoustic * (2.0 / (c.acoustic_codebook_size - 1)) - 1.0
        return torch.cat((F.embedding(semantic, embedding), values), dim=-1).transpose(1, 2)

    @torch.no_grad()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, T, 37] -> audio [B, T * 1920] float32, clipped to [-1, 1] (the decoder has no tanh; the
        reference warns past full scale and leaves the clipping to the PCM encoding)."""
        dtype = self.output_proj.conv.weight.dtype
        x = self.latent(codes.to(self.device)).to(dtype)
        for block in self.decoder_blocks:
            x = block(x.transpose(1, 2)).transpose(1, 2) if isinstance(block, CodecStage) else block(x)
        x = self.output_proj(x)  # [B, patch, steps]
        return x.transpose(1, 2).reshape(x.shape[0], -1).float().clamp(-1.0, 1.0)
