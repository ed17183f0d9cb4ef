"""Our Llama backbone over the shared static-KV-cache decoder blocks (`layers/decoder.py`).

Module and parameter names follow transformers' `LlamaForCausalLM` (`model.embed_tokens`,
`model.layers.N.self_attn.q_proj`, …, `model.norm`, `lm_head`), so an official checkpoint loads
as is. A Llama layer is a Qwen3 layer without the per-head q/k RMSNorm, and its RoPE may use
`llama3` frequency scaling; everything else (cache writes, masking, varlen flash attention on
CUDA, fused projections) is the shared code.
"""
from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from ..layers.decoder import DecoderStack, KVCache, Step
from ..rope import rope_cos_sin_of as rope_cos_sin
from .config import OrpheusConfig


class LlamaModel(DecoderStack):
    """`model`: token embeddings, decoder layers, final norm."""

    def __init__(self, cfg: OrpheusConfig) -> None:
        super().__init__(cfg.num_hidden_layers, cfg.hidden_size, cfg.intermediate_size, cfg.num_attention_heads,
                         cfg.num_key_value_heads, cfg.head_dim, cfg.rms_norm_eps)
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        for layer in self.layers:  # Llama has no q/k norm: identities keep the shared forward and no parameters
            layer.self_attn.q_norm, layer.self_attn.k_norm = nn.Identity(), nn.Identity()


class LlamaForCausalLM(nn.Module):
    """The backbone with its LM head; a tied head reads the embedding table (no `lm_head` parameter then)."""

    def __init__(self, cfg: OrpheusConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.model = LlamaModel(cfg)
        self.lm_head = None if cfg.tie_word_embeddings else nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self._inv_freq: torch.Tensor | None = None  # float32 [head_dim / 2] on the model's device, made on first use

    @property
    def head_weight(self) -> torch.Tensor:
        """[vocab, hidden]: the rows of the head (the embedding table when tied)."""
        return self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight

    def inv_freq(self, device: torch.device) -> torch.Tensor:
        """RoPE frequencies, kept in float32 whatever the model dtype (not a buffer: `.to(dtype)` must not touch it)."""
        if self._inv_freq is None or self._inv_freq.device != device:
            self._inv_freq = self.cfg.inv_freq(device)
        return self._inv_freq

    def allocate_cache(self, num_rows: int, max_seq_len: int, device: torch.device, dtype: torch.dtype, pool_positions: int | None = None) -> KVCache:
        c = self.cfg
        return KVCache.allocate(c.num_hidden_layers, num_rows, c.num_key_value_heads, max_seq_len, c.head_dim,
                                device, dtype, pool_positions)

    def step(self, rows: torch.Tensor, positions: torch.Tensor, cache: KVCache, dtype: torch.dtype) -> Step:
        """Where a forward pass reads and writes (rows [B], positions [B, T]), with Llama's RoPE."""
        step = Step.build(rows, positions, self.cfg.head_dim, self.cfg.rope_theta, cache, dtype)
        cos, sin = rope_cos_sin(positions, self.inv_freq(positions.device), dtype)
        return dataclasses.replace(step, cos=cos, sin=sin)

    def forward(self, ids: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """ids, positions: [B, T] int64 -> normed hidden state of each row's last token [B, hidden]."""
        x = self.model.embed_tokens(ids)
        return self.model(x, self.step(rows, positions, cache, x.dtype), cache)[:, -1]

    def hidden_states(self, ids: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor,
                      cache: KVCache) -> torch.Tensor:
        """Like `forward`, but every token's normed hidden state: [B, T, hidden] (tests, scoring)."""
        x = self.model.embed_tokens(ids)
        return self.model(x, self.step(rows, positions, cache, x.dtype), cache)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden: [..., hidden] -> full-vocabulary logits [..., vocab] float32."""
        return F.linear(hidden, self.head_weight).float()

    def fuse_projections(self) -> None:
        self.model.fuse_projections()
