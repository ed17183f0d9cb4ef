"""FlashTTS's multi-token-prediction blocks (`mtp_block` in its `Qwen2LM_MTP`).

Each block is a transformers `Qwen2DecoderLayer` that FlashTTS runs on the backbone's last hidden state alone, a
sequence of one token with no cache: block j's output, through the LM's shared speech head (`llm_decoder`), is
the distribution of the step's token j. Every token of a step comes from a block (block 0 included); the head
never reads the backbone's hidden state directly at inference. Blocks run in parallel, each from the same hidden
state: token j does not see the tokens sampled before it in its step.

On one token, attention is softmax over a single key, which is 1: the output is o_proj(v_proj(x)) and RoPE, q
and k drop out. `OneTokenAttention` computes exactly that; q_proj and k_proj are kept so the checkpoint loads.
"""
from __future__ import annotations

import torch
from torch import nn

from ..layers.decoder import MLP, RMSNorm

RMS_NORM_EPS = 1e-6  # transformers' Qwen2Config default, which FlashTTS's MTP blocks keep


class OneTokenAttention(nn.Module):
    """Qwen2 attention's parameters (`q_proj`, `k_proj`, `v_proj` with bias, `o_proj` without) on one token."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.q_proj = nn.Linear(hidden_size, hidden_size)
        self.k_proj = nn.Linear(hidden_size, hidden_size)
        self.v_proj = nn.Linear(hidden_size, hidden_size)
        self.o_proj = nn.Linear(hidden_size, hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.o_proj(self.v_proj(x))


class MTPBlock(nn.Module):
    """A Qwen2 decoder layer on one token: h + attn(norm(h)), then + mlp(norm(...)); no final norm after it."""

    def __init__(self, hidden_size: int, intermediate_size: int) -> None:
        super().__init__()
        self.self_attn = OneTokenAttention(hidden_size)
        self.mlp = MLP(hidden_size, intermediate_size)
        self.input_layernorm = RMSNorm(hidden_size, RMS_NORM_EPS)
        self.post_attention_layernorm = RMSNorm(hidden_size, RMS_NORM_EPS)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [B, H] (the backbone's final-normed last hidden state) -> [B, H], what the head reads."""
        hidden = hidden + self.self_attn(self.input_layernorm(hidden))
        return hidden + self.mlp(self.post_attention_layernorm(hidden))
