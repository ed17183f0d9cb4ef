"""CosyVoice 3's token-to-mel flow (the reference's CausalMaskedDiffWithDiT and CausalConditionalCFM).

Speech tokens (25 Hz) -> `input_embedding` -> `pre_lookahead_layer` (a conv that reads 3 tokens ahead,
then a causal one) -> repeated `token_mel_ratio` times: mu, the condition at 50 Hz mel frames. The mel
is then solved from noise by Euler steps of a conditional flow matching ODE whose velocity the DiT
estimator (models/layers/dit.py) predicts, with classifier-free guidance: v = (1 + r) v(mu, spk) - r v(0, 0).

The initial noise is the reference's: one fixed N(0, 1) tensor drawn from seed 0 ([1, 80, 15000], 300 s of
mel frames), indexed by the frame's position in the stream (modulo its length, so any stream has noise).
A window that knows where it starts in its stream (`start_frames`) therefore starts from the same noise
as a full decode of the stream at the same frames.

The audio condition `cond` (a prompt's mel, in the reference's zero-shot mode) is zeros here: the codec's
only condition is the speaker embedding (the reference's SFT-speaker path).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from ..layers.dit import DiT, DiTConfig

NOISE_SEED = 0  # the reference draws its fixed noise right after set_all_random_seed(0)
NOISE_FRAMES = 50 * 300  # mel frames of fixed noise (300 s at 50 Hz)


@dataclass(frozen=True)
class FlowConfig:
    """The reference flow's sizes (cosyvoice3.yaml `flow`)."""

    vocab_size: int = 6561
    input_size: int = 80  # token embedding width (= mu's)
    output_size: int = 80  # mel bins
    spk_embed_dim: int = 192
    token_mel_ratio: int = 2
    pre_lookahead_len: int = 3
    pre_lookahead_channels: int = 1024
    estimator: DiTConfig = field(default_factory=DiTConfig)

    def __post_init__(self) -> None:
        if isinstance(self.estimator, dict):
            object.__setattr__(self, "estimator", DiTConfig(**self.estimator))
        e = self.estimator
        if (e.mel_dim, e.mu_dim, e.spk_dim) != (self.output_size, self.input_size, self.output_size):
            raise ValueError(f"the estimator's mel/mu/spk dims must be ({self.output_size}, {self.input_size}, "
                             f"{self.output_size}), got ({e.mel_dim}, {e.mu_dim}, {e.spk_dim})")
        if min(self.vocab_size, self.token_mel_ratio, self.pre_lookahead_len, self.pre_lookahead_channels) < 1:
            raise ValueError(f"flow sizes must be >= 1: {self}")

    def to_dict(self) -> dict:
        return asdict(self)


class PreLookaheadLayer(nn.Module):
    """conv1 reads a token and the `pre_lookahead_len` after it (zeros past the end), conv2 the 2 before
    it causally; residual. A token's output depends on tokens t-2 .. t+3."""

    def __init__(self, in_channels: int, channels: int, pre_lookahead_len: int) -> None:
        super().__init__()
        self.pre_lookahead_len = pre_lookahead_len
        self.conv1 = nn.Conv1d(in_channels, channels, pre_lookahead_len + 1)
        self.conv2 = nn.Conv1d(channels, in_channels, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [B, T, C] embedded tokens, zero past each row's end -> [B, T, C]."""
        h = F.leaky_relu(self.conv1(F.pad(x.transpose(1, 2), (0, self.pre_lookahead_len))))
        h = self.conv2(F.pad(h, (self.conv2.kernel_size[0] - 1, 0)))
        return h.transpose(1, 2) + x


def fixed_noise(mel_dim: int) -> torch.Tensor:
    """The reference's rand_noise ([1, mel, NOISE_FRAMES] from seed 0) as [NOISE_FRAMES, mel] float32."""
    generator = torch.Generator().manual_seed(NOISE_SEED)
    return torch.randn([1, mel_dim, NOISE_FRAMES], generator=generator)[0].t().contiguous()


def cosine_time_span(num_steps: int, device: torch.device) -> torch.Tensor:
    """[num_steps + 1] float32 flow times from 0 to 1, dense near 0 (the reference's 'cosine' t-scheduler)."""
    t = torch.linspace(0, 1, num_steps + 1, device=device, dtype=torch.float32)
    return 1 - torch.cos(t * 0.5 * math.pi)


class ConditionalFlowMatching(nn.Module):
    """The Euler solver with classifier-free guidance around the DiT `estimator`, from fixed noise."""

    def __init__(self, estimator_cfg: DiTConfig) -> None:
        super().__init__()
        self.estimator = DiT(estimator_cfg)
        self.register_buffer("rand_noise", fixed_noise(estimator_cfg.mel_dim), persistent=False)

    def noise(self, start_frames: torch.Tensor, num_frames: int) -> torch.Tensor:
        """start_frames: [B] int64 mel positions (may be negative) -> [B, num_frames, mel] float32."""
        positions = (start_frames[:, None] + torch.arange(num_frames, device=start_frames.device)) % NOISE_FRAMES
        return self.rand_noise[positions]

    def forward(self, mu: torch.Tensor, mask: torch.Tensor, spks: torch.Tensor, noise: torch.Tensor,
                num_steps: int, cfg_rate: float) -> torch.Tensor:
        """mu: [B, N, mu_dim], mask: [B, N] bool, spks: [B, spk_dim], noise: [B, N, mel] -> mel [B, N, mel]."""
        t_span = cosine_time_span(num_steps, mu.device)
        x = noise.to(mu.dtype)
        cond = torch.zeros_like(x)
        # rows [conditioned; unconditioned]: the second half drops mu, the speaker and cond
        mu_in, spks_in = torch.cat([mu, torch.zeros_like(mu)]), torch.cat([spks, torch.zeros_like(spks)])
        mask_in, cond_in = torch.cat([mask, mask]), torch.cat([cond, cond])
        for step in range(num_steps):
            t = t_span[step].expand(2 * x.shape[0]).to(mu.dtype)
            v = self.estimator(torch.cat([x, x]), mask_in, mu_in, t, spks_in, cond_in)
            v_cond, v_uncond = v.chunk(2)
            x = x + (t_span[step + 1] - t_span[step]).to(x.dtype) * ((1.0 + cfg_rate) * v_cond - cfg_rate * v_uncond)
        return x


class Flow(nn.Module):
    """Tokens + speaker embedding -> mel frames (token_mel_ratio per token)."""

    def __init__(self, cfg: FlowConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.input_embedding = nn.Embedding(cfg.vocab_size, cfg.input_size)
        self.spk_embed_affine_layer = nn.Linear(cfg.spk_embed_dim, cfg.output_size)
        self.pre_lookahead_layer = PreLookaheadLayer(cfg.input_size, cfg.pre_lookahead_channels,
                                                     cfg.pre_lookahead_len)
        self.decoder = ConditionalFlowMatching(cfg.estimator)

    def token_condition(self, tokens: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """tokens: [B, T] int64, lengths: [B] -> mu [B, T * ratio, input_size], mel mask [B, T * ratio] bool."""
        token_mask = torch.arange(tokens.shape[1], device=tokens.device)[None] < lengths[:, None]
        x = self.input_embedding(tokens.clamp(min=0)) * token_mask[..., None].to(self.input_embedding.weight.dtype)
        mu = self.pre_lookahead_layer(x).repeat_interleave(self.cfg.token_mel_ratio, dim=1)
        return mu, token_mask.repeat_interleave(self.cfg.token_mel_ratio, dim=1)

    def speaker(self, embedding: torch.Tensor) -> torch.Tensor:
        """[B, spk_embed_dim] x-vectors -> [B, output_size] (L2-normalised first; zeros stay zeros)."""
        return self.spk_embed_affine_layer(F.normalize(embedding, dim=1))

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor, embedding: torch.Tensor,
                start_frames: torch.Tensor, num_steps: int, cfg_rate: float) -> torch.Tensor:
        """tokens: [B, T] int64 right-padded, lengths: [B], embedding: [B, spk_embed_dim], start_frames: [B]
        each row's first token's index in its stream -> mel [B, T * ratio, output_size] (garbage past a
        row's length)."""
        dtype = self.input_embedding.weight.dtype
        mu, mask = self.token_condition(tokens, lengths)
        noise = self.decoder.noise(start_frames * self.cfg.token_mel_ratio, mu.shape[1])
        return self.decoder(mu, mask, self.speaker(embedding.to(dtype)), noise, num_steps, cfg_rate)
