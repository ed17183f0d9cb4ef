"""FlashTTS's token-to-mel decoder: an X-prediction mean-flow DiT with block attention, and its few-step sampler.

Our own implementation of `DiT` in FlashTTS's `jit_meanflow_xpred/model/backbones/dit_mask.py` as its inference
(`infer_meanflow_jit_xpred.inference_meanflow`) runs it. Module names follow it (`time_embed.time_mlp`,
`text_embed.text_embed`, `input_embed.proj`, `transformer_blocks.N.attn.to_q`, `norm_out`, `proj_out`), so a
FlashTTS checkpoint's `transformer.*` weights load; three of its parts are not ours (see `FOREIGN_PREFIXES`).

The shape, per token: its embedding is repeated over 4 mel frames (10 ms each: 25 tokens/s); a frame's input is
proj([noisy mel x | reference embedding | token embedding | speaker embedding]); DiT blocks (adaLN on the time
embedding, rotary self-attention, a GELU feed-forward); a final adaLN; a linear to 80 mel bins.

Attention is *block* attention: frames are cut into blocks of `block_size` frames (24 = 6 tokens) and a frame
attends to its own block, plus the next block in `forward_layers` (layer 0) and the previous block in
`backward_layers` (5, 10, 15). So an output block depends on the input blocks from 3 before it to 1 after it,
and on nothing else: a window holding those blocks, cut on the same block grid, gives exactly the full decode's
mel there. That one block ahead is FlashTTS's 6 tokens of lookahead.

The sampler (X-prediction, t = 1 noise -> t = 0 data): the network predicts clean mel x_pred from (x_t, t); with
u = (x_t - x_pred) / t an Euler step is x_{t'} = x_t - (t - t') u, over `n_evals` equal steps from 1 to 0 (FlashTTS's
`get_timesteps`: 1 evaluation [1, 0], 2 evaluations [1, 0.5, 0]). Classifier-free guidance is distilled into the
model: its inference runs one conditional pass per evaluation (its `cfg_strength` argument is unused there).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F
from torch import nn

# keys of a FlashTTS checkpoint's `transformer.*` that our decoder does not hold: the ECAPA-TDNN that turns the
# reference mel into the 128-dim reference embedding (the stream's condition: computed once, by a voice encoder),
# a convolutional position embedding its `InputEmbedding` builds but never calls, and x-transformers' RoPE table
FOREIGN_PREFIXES = ("input_embed.spk_encoder.", "input_embed.conv_pos_embed.", "rotary_embed.")
TIME_FREQ_DIM = 256  # TimestepEmbedding's sinusoidal width
TIME_SCALE = 1000.0  # SinusPositionEmbedding's scale on t in [0, 1]
ROPE_BASE = 10000.0
EULER_EPS = 1e-8  # FlashTTS divides by (t + 1e-8)


@dataclass(frozen=True)
class MeanFlowConfig:
    """FlashTTS's `model.arch` (+ `text_num_embeds`, the mel width and the condition widths). Defaults: the
    published fm_10ms_contrasive_ecapa_pmeanflow.yaml (16 x 768, 159.25 M parameters with its ECAPA-TDNN)."""

    dim: int = 768
    depth: int = 16
    heads: int = 16
    dim_head: int = 64
    ff_mult: int = 2
    text_dim: int = 512
    text_num_embeds: int = 6563  # the embedding has text_num_embeds + 1 rows; speech codes are [0, 6561)
    mel_dim: int = 80
    mel_per_token: int = 4  # 10 ms mel frames per 40 ms token
    block_size: int = 24  # mel frames per attention block (6 tokens)
    forward_layers: tuple[int, ...] = (0,)  # layers that also see the next block
    backward_layers: tuple[int, ...] = (5, 10, 15)  # layers that also see the previous block
    ref_dim: int = 128  # the ECAPA-TDNN embedding of the reference mel (its `lin_neurons`)
    spk_dim: int = 192  # the CAMPPlus speaker embedding

    def __post_init__(self) -> None:
        for name in ("forward_layers", "backward_layers"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if self.block_size % self.mel_per_token:
            raise ValueError(f"block_size {self.block_size} must be whole tokens of {self.mel_per_token} frames")
        if any(not 0 <= i < self.depth for i in self.forward_layers + self.backward_layers):
            raise ValueError(f"forward/backward layers must be in [0, {self.depth})")
        if self.dim_head % 2:
            raise ValueError(f"dim_head must be even for RoPE, got {self.dim_head}")

    @property
    def block_tokens(self) -> int:
        return self.block_size // self.mel_per_token

    @property
    def condition_dim(self) -> int:
        """The stream's condition: [speaker embedding (spk_dim) | reference embedding (ref_dim)]."""
        return self.spk_dim + self.ref_dim

    @classmethod
    def from_dict(cls, d: dict) -> "MeanFlowConfig":
        return cls(**{k: v for k, v in d.items() if k in {f.name for f in fields(cls)}})

    def to_dict(self) -> dict:
        return {f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v for f in fields(self)}


class TimestepEmbedding(nn.Module):
    """t [B] in [0, 1] -> [B, dim]: sinusoids of 1000 t, then an MLP (`time_mlp`)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.time_mlp = nn.Sequential(nn.Linear(TIME_FREQ_DIM, dim), nn.SiLU(), nn.Linear(dim, dim))

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        half = TIME_FREQ_DIM // 2
        freqs = torch.exp(torch.arange(half, device=t.device).float() * -(math.log(10000) / (half - 1)))
        angles = TIME_SCALE * t.float()[:, None] * freqs[None]
        return self.time_mlp(torch.cat((angles.sin(), angles.cos()), dim=-1).to(self.time_mlp[0].weight.dtype))


class TextEmbedding(nn.Module):
    """codes [B, T] -> [B, T * mel_per_token, text_dim]: each token's embedding repeated over its frames."""

    def __init__(self, num_embeds: int, text_dim: int, mel_per_token: int) -> None:
        super().__init__()
        self.text_embed = nn.Embedding(num_embeds + 1, text_dim)
        self.mel_per_token = mel_per_token

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        return self.text_embed(codes).repeat_interleave(self.mel_per_token, dim=1)


class InputEmbedding(nn.Module):
    """`proj` of [x | reference embedding | token embedding | speaker embedding] per frame. Only x changes
    between evaluations, so the rest (`condition`) is projected once per decode."""

    def __init__(self, mel_dim: int, text_dim: int, ref_dim: int, spk_dim: int, out_dim: int) -> None:
        super().__init__()
        self.mel_dim = mel_dim
        self.proj = nn.Linear(mel_dim + ref_dim + text_dim + spk_dim, out_dim)

    def condition(self, ref: torch.Tensor, text: torch.Tensor, spk: torch.Tensor) -> torch.Tensor:
        """ref [B, ref_dim], text [B, N, text_dim], spk [B, spk_dim] -> [B, N, out_dim] (bias included)."""
        n = text.shape[1]
        rest = torch.cat((ref[:, None].expand(-1, n, -1), text, spk[:, None].expand(-1, n, -1)), dim=-1)
        return F.linear(rest, self.proj.weight[:, self.mel_dim:], self.proj.bias)

    def forward(self, x: torch.Tensor, condition: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.proj.weight[:, : self.mel_dim]) + condition


class AdaLayerNorm(nn.Module):
    """adaLN of a DiT block: six modulations from the time embedding (shift, scale, gate for attention, then
    for the feed-forward)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.linear = nn.Linear(dim, dim * 6)
        self.norm = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        shift, scale, gate, shift_ff, scale_ff, gate_ff = self.linear(F.silu(t)).chunk(6, dim=1)
        return self.norm(x) * (1 + scale[:, None]) + shift[:, None], gate, shift_ff, scale_ff, gate_ff


class AdaLayerNormFinal(nn.Module):
    """FlashTTS's `AdaLayerNorm_Final`: scale, then shift (in that order) from the time embedding."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.linear = nn.Linear(dim, dim * 2)
        self.norm = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        scale, shift = self.linear(F.silu(t)).chunk(2, dim=1)
        return self.norm(x) * (1 + scale[:, None]) + shift[:, None]


class Attention(nn.Module):
    """Multi-head self-attention (`to_q`, `to_k`, `to_v`, `to_out.0`, all with bias) with interleaved-pair RoPE
    (x-transformers' `apply_rotary_pos_emb`) and a boolean block mask."""

    def __init__(self, dim: int, heads: int, dim_head: int) -> None:
        super().__init__()
        self.heads, self.dim_head = heads, dim_head
        inner = heads * dim_head
        self.to_q, self.to_k, self.to_v = nn.Linear(dim, inner), nn.Linear(dim, inner), nn.Linear(dim, inner)
        self.to_out = nn.ModuleList([nn.Linear(inner, dim), nn.Dropout(0.0)])

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], mask: torch.Tensor) -> torch.Tensor:
        """x: [B, N, dim], rope: cos, sin [N, dim_head], mask: [B, 1, N, N] bool (True = attend)."""
        b, n, _ = x.shape
        q, k, v = (proj(x).view(b, n, self.heads, self.dim_head).transpose(1, 2)
                   for proj in (self.to_q, self.to_k, self.to_v))
        out = F.scaled_dot_product_attention(rotate(q, *rope), rotate(k, *rope), v, attn_mask=mask)
        return self.to_out[0](out.transpose(1, 2).reshape(b, n, -1))


def rope_tables(num_frames: int, dim_head: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [N, dim_head] float32 for positions 0..N-1, each frequency repeated for its pair of channels.
    Positions count from the window's start: attention depends on position differences only."""
    inv_freq = 1.0 / ROPE_BASE ** (torch.arange(0, dim_head, 2, device=device).float() / dim_head)
    angles = torch.arange(num_frames, device=device).float()[:, None] * inv_freq[None]
    angles = angles.repeat_interleave(2, dim=-1)
    return angles.cos(), angles.sin()


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, H, N, D] * cos + rotate_half(x) * sin, rotate_half over interleaved pairs: (a, b) -> (-b, a)."""
    pairs = x.unflatten(-1, (-1, 2))
    rotated = torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)
    return (x.float() * cos + rotated.float() * sin).to(x.dtype)


class FeedForward(nn.Module):
    """`ff.0.0` Linear -> tanh-GELU -> `ff.2` Linear (FlashTTS's names, dropout at `ff.1`)."""

    def __init__(self, dim: int, mult: int) -> None:
        super().__init__()
        inner = dim * mult
        self.ff = nn.Sequential(nn.Sequential(nn.Linear(dim, inner), nn.GELU(approximate="tanh")), nn.Dropout(0.0),
                                nn.Linear(inner, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ff(x)


class DiTBlock(nn.Module):
    """adaLN -> block attention -> gated residual -> adaLN-modulated feed-forward -> gated residual.
    `reach`: (previous blocks, next blocks) this layer's attention sees besides its own."""

    def __init__(self, dim: int, heads: int, dim_head: int, ff_mult: int, reach: tuple[int, int]) -> None:
        super().__init__()
        self.reach = reach
        self.attn_norm = AdaLayerNorm(dim)
        self.attn = Attention(dim, heads, dim_head)
        self.ff_norm = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.ff = FeedForward(dim, ff_mult)

    def forward(self, x: torch.Tensor, t: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor],
                masks: dict[tuple[int, int], torch.Tensor]) -> torch.Tensor:
        norm, gate, shift_ff, scale_ff, gate_ff = self.attn_norm(x, t)
        x = x + gate[:, None] * self.attn(norm, rope, masks[self.reach])
        norm = self.ff_norm(x) * (1 + scale_ff[:, None]) + shift_ff[:, None]
        return x + gate_ff[:, None] * self.ff(norm)


def block_masks(block_ids: torch.Tensor, reaches: set[tuple[int, int]]) -> dict[tuple[int, int], torch.Tensor]:
    """block_ids [B, N] int64 (each frame's block) -> per reach (previous, next) a [B, 1, N, N] bool mask:
    query frame i may attend key frame j when block(j) - block(i) is in [-previous, next]."""
    diff = block_ids[:, None, :] - block_ids[:, :, None]  # [B, N (query), N (key)]
    return {(back, ahead): ((diff >= -back) & (diff <= ahead))[:, None] for back, ahead in reaches}


class MeanFlowDiT(nn.Module):
    """The DiT: (x_t [B, N, mel], t [B], condition of the decode) -> x_pred [B, N, mel]."""

    def __init__(self, cfg: MeanFlowConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.time_embed = TimestepEmbedding(cfg.dim)
        self.text_embed = TextEmbedding(cfg.text_num_embeds, cfg.text_dim, cfg.mel_per_token)
        self.input_embed = InputEmbedding(cfg.mel_dim, cfg.text_dim, cfg.ref_dim, cfg.spk_dim, cfg.dim)
        self.transformer_blocks = nn.ModuleList(
            DiTBlock(cfg.dim, cfg.heads, cfg.dim_head, cfg.ff_mult,
                     (int(i in cfg.backward_layers), int(i in cfg.forward_layers))) for i in range(cfg.depth))
        self.norm_out = AdaLayerNormFinal(cfg.dim)
        self.proj_out = nn.Linear(cfg.dim, cfg.mel_dim)

    def condition(self, codes: torch.Tensor, conditions: torch.Tensor) -> torch.Tensor:
        """codes [B, T] int64, conditions [B, spk_dim + ref_dim] -> the per-frame input projection of
        everything but x: [B, T * mel_per_token, dim]."""
        spk, ref = conditions.to(self.proj_dtype).split((self.cfg.spk_dim, self.cfg.ref_dim), dim=-1)
        return self.input_embed.condition(ref, self.text_embed(codes), spk)

    @property
    def proj_dtype(self) -> torch.dtype:
        return self.proj_out.weight.dtype

    def forward(self, x: torch.Tensor, t: torch.Tensor, condition: torch.Tensor,
                masks: dict[tuple[int, int], torch.Tensor]) -> torch.Tensor:
        time = self.time_embed(t)
        h = self.input_embed(x.to(self.proj_dtype), condition)
        rope = rope_tables(h.shape[1], self.cfg.dim_head, h.device)
        for block in self.transformer_blocks:
            h = block(h, time, rope, masks)
        return self.proj_out(self.norm_out(h, time)).float()

    def sample(self, noise: torch.Tensor, condition: torch.Tensor, block_ids: torch.Tensor,
               n_evals: int) -> torch.Tensor:
        """noise [B, N, mel] float32 (x at t = 1) -> mel [B, N, mel] float32 after `n_evals` Euler steps."""
        masks = block_masks(block_ids, {block.reach for block in self.transformer_blocks})
        times = torch.linspace(1.0, 0.0, n_evals + 1).tolist()
        x = noise
        for t, t_next in zip(times[:-1], times[1:]):
            x_pred = self(x, torch.full((x.shape[0],), t, device=x.device), condition, masks)
            x = x - (t - t_next) * (x - x_pred) / (t + EULER_EPS)
        return x
