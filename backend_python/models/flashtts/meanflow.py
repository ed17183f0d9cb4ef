"""FlashTTS's token-to-mel decoder: an X-prediction mean-flow DiT with block attention, and its few-step sampler.

Our own implementation of `DiT` in FlashTTS's `jit_meanflow_xpred/model/backbones/dit_mask.py` as its inference
(`infer_meanflow_jit_xpred.inference_meanflow`) runs it, on the DiT blocks of layers/dit.py. Module names follow
it (`time_embed.time_mlp`, `text_embed.text_embed`, `input_embed.proj`, `rotary_embed`, `transformer_blocks.N.attn.
to_q`, `norm_out`, `proj_out`), so a FlashTTS checkpoint's `transformer.*` weights load; two of its parts are not
ours (`FOREIGN_PREFIXES`). Where it differs from CosyVoice 3's DiT (layers/dit.py): no position conv in use,
RoPE on every head rather than the first head's channels, block attention, and the condition layout below.

The shape, per token: its embedding is repeated over 4 mel frames (10 ms each: 25 tokens/s); a frame's input is
proj([noisy mel x | reference embedding | token embedding | speaker embedding]); DiT blocks (adaLN on the time
embedding, rotary self-attention, a GELU feed-forward); a final adaLN; a linear to 80 mel bins.

Attention is *block* attention: frames are cut into blocks of `block_size` frames (24 = 6 tokens) and a frame
attends to its own block, plus the next block in `forward_layers` (layer 0) and the previous block in
`backward_layers` (5, 10, 15). So one evaluation's output block depends on the input blocks from 3 before it to
1 after it, and on nothing else: a window holding those blocks, cut on the same block grid, gives exactly the
full decode's mel there. That one block ahead is FlashTTS's 6 tokens of lookahead. Each further evaluation reads
the previous one's output, so n evaluations reach 3n blocks back and n blocks ahead.

The sampler (X-prediction, t = 1 noise -> t = 0 data): the network predicts clean mel x_pred from (x_t, t); with
u = (x_t - x_pred) / t an Euler step is x_{t'} = x_t - (t - t') u, over `n_evals` equal steps from 1 to 0 (FlashTTS's
`get_timesteps`: 1 evaluation [1, 0], 2 evaluations [1, 0.5, 0]). The network sees t only (FlashTTS's inference
calls `forward`; its `fast_forward` would add an embedding of the step's end r). Classifier-free guidance is
distilled into the model: its inference runs one conditional pass per evaluation (`cfg_strength` is unused there).
"""
from __future__ import annotations

from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F
from torch import nn

from protocol.settings import read_settings

from ..layers import dit

# keys of a FlashTTS checkpoint's `transformer.*` that our decoder does not hold: the ECAPA-TDNN that turns the
# reference mel into the 128-dim reference embedding (the stream's condition: computed once, by a voice encoder),
# and a convolutional position embedding its `InputEmbedding` builds but never calls
FOREIGN_PREFIXES = ("input_embed.spk_encoder.", "input_embed.conv_pos_embed.")
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
    def condition_dim(self) -> int:
        """The stream's condition: [speaker embedding (spk_dim) | reference embedding (ref_dim)]."""
        return self.spk_dim + self.ref_dim

    @classmethod
    def from_dict(cls, d: dict) -> "MeanFlowConfig":
        return read_settings(cls, d, ignore_unknown=True)

    def to_dict(self) -> dict:
        return {f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v for f in fields(self)}


class TextEmbedding(nn.Module):
    """codes [B, T] -> [B, T * mel_per_token, text_dim]: each token's embedding repeated over its frames."""

    def __init__(self, num_embeds: int, text_dim: int, mel_per_token: int) -> None:
        super().__init__()
        self.text_embed = nn.Embedding(num_embeds + 1, text_dim)
        self.mel_per_token = mel_per_token

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        return self.text_embed(codes).repeat_interleave(self.mel_per_token, dim=1)


class InputEmbedding(nn.Module):
    """`proj` of [x | reference embedding | token embedding | speaker embedding] per frame (no position
    embedding: FlashTTS builds a conv one but never calls it). Only x changes between evaluations, so the rest
    (`condition`) is projected once per decode."""

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


class BlockAttention(dit.Attention):
    """The DiT's attention with FlashTTS's two differences: RoPE rotates every head (its projections are split
    into heads first), and the mask is a block mask [B, 1, N, N] (True = attend)."""

    def forward(self, x: torch.Tensor, mask: torch.Tensor, freqs: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        q, k, v = (proj(x).unflatten(-1, (self.heads, self.dim_head)).transpose(1, 2)
                   for proj in (self.to_q, self.to_k, self.to_v))
        out = F.scaled_dot_product_attention(dit.apply_rotary(q, freqs), dit.apply_rotary(k, freqs), v,
                                             attn_mask=mask)
        return self.to_out[0](out.transpose(1, 2).flatten(2))


class BlockDiTBlock(dit.DiTBlock):
    """A DiT block whose attention sees `reach` = (previous blocks, next blocks) besides its own block."""

    def __init__(self, dim: int, heads: int, dim_head: int, ff_mult: int, reach: tuple[int, int]) -> None:
        super().__init__(dim, heads, dim_head, ff_mult)
        self.attn = BlockAttention(dim, heads, dim_head)
        self.reach = reach

    def forward(self, x: torch.Tensor, t: torch.Tensor, masks: dict[tuple[int, int], torch.Tensor],
                freqs: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return super().forward(x, t, masks[self.reach], freqs)


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
        self.time_embed = dit.TimestepEmbedding(cfg.dim)
        self.text_embed = TextEmbedding(cfg.text_num_embeds, cfg.text_dim, cfg.mel_per_token)
        self.input_embed = InputEmbedding(cfg.mel_dim, cfg.text_dim, cfg.ref_dim, cfg.spk_dim, cfg.dim)
        self.rotary_embed = dit.RotaryEmbedding(cfg.dim_head)
        reaches = [(int(i in cfg.backward_layers), int(i in cfg.forward_layers)) for i in range(cfg.depth)]
        self.transformer_blocks = nn.ModuleList(
            BlockDiTBlock(cfg.dim, cfg.heads, cfg.dim_head, cfg.ff_mult, reach) for reach in reaches)
        self.norm_out = dit.AdaLayerNormZeroFinal(cfg.dim)
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
        freqs = self.rotary_embed(h.shape[1])  # positions from the window's start: attention sees differences
        for block in self.transformer_blocks:
            h = block(h, time, masks, freqs)
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
