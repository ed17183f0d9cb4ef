"""A Qwen2 decoder over the shared static-KV-cache layers (`decoder.py`): Llama layers with q/k/v biases.

Module and parameter names follow transformers' `Qwen2ForCausalLM` without its text head
(`model.embed_tokens`, `model.layers.N.self_attn.q_proj.bias`, …, `model.norm`): the speech LMs built
on it (CosyVoice 2 and 3) read their own speech head, and Qwen2.5-0.5B ties its text head to the
embeddings anyway. RoPE is the default (unscaled) one; sliding-window attention is not modelled
(Qwen2.5's configs leave it off).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .config_checks import check_attention
from .decoder import DecoderStack, KVCache, Step

MODEL_TYPE = "qwen2"


@dataclass(frozen=True)
class Qwen2Config:
    """The Qwen2 fields our decoder uses. Defaults: Qwen2.5-0.5B (CosyVoice's `CosyVoice-BlankEN`)."""

    vocab_size: int = 151936
    hidden_size: int = 896
    intermediate_size: int = 4864
    num_hidden_layers: int = 24
    num_attention_heads: int = 14
    num_key_value_heads: int = 2
    head_dim: int = 64
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1000000.0
    max_position_embeddings: int = 32768
    tie_word_embeddings: bool = True

    def __post_init__(self) -> None:
        check_attention(self.num_attention_heads, self.num_key_value_heads, self.head_dim)

    @property
    def num_parameters(self) -> int:
        """Parameters of `Qwen2Backbone` (embeddings, layers, final norm; no text head), counted from the sizes."""
        h, q, kv = self.hidden_size, self.num_attention_heads * self.head_dim, self.num_key_value_heads * self.head_dim
        attention = h * (q + 2 * kv) + (q + 2 * kv) + q * h
        layer = attention + 3 * h * self.intermediate_size + 2 * h
        return self.vocab_size * h + self.num_hidden_layers * layer + h

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Qwen2Config":
        """A transformers Qwen2 `config.json` (either RoPE spelling: `rope_theta` or `rope_parameters`)."""
        if d.get("model_type", MODEL_TYPE) != MODEL_TYPE:
            raise ValueError(f"not a Qwen2 config: model_type {d.get('model_type')!r}")
        if d.get("hidden_act", "silu") != "silu":
            raise ValueError(f"only SiLU Qwen2 layers are supported, got {d.get('hidden_act')!r}")
        rope = dict(d.get("rope_parameters") or d.get("rope_scaling") or {})
        if rope.get("rope_type", rope.get("type", "default")) != "default":
            raise ValueError(f"only default RoPE is supported, got {rope}")
        kwargs = {k: d[k] for k in cls.__dataclass_fields__ if k in d and k != "rope_theta"}
        kwargs.setdefault("head_dim", d["hidden_size"] // d["num_attention_heads"])
        return cls(**kwargs, rope_theta=float(rope.get("rope_theta", d.get("rope_theta", 1000000.0))))

    def to_dict(self) -> dict[str, Any]:
        """The transformers Qwen2 `config.json` fields (transformers 5's `rope_parameters`)."""
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "rope_theta"}
        return {"architectures": ["Qwen2ForCausalLM"], "model_type": MODEL_TYPE, **d, "hidden_act": "silu",
                "use_sliding_window": False, "rope_parameters": {"rope_type": "default", "rope_theta": self.rope_theta}}


class Qwen2Model(DecoderStack):
    """`model`: token embeddings, decoder layers with q/k/v biases, final norm."""

    def __init__(self, cfg: Qwen2Config) -> None:
        super().__init__(cfg.num_hidden_layers, cfg.hidden_size, cfg.intermediate_size, cfg.num_attention_heads,
                         cfg.num_key_value_heads, cfg.head_dim, cfg.rms_norm_eps, qkv_bias=True)
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        for layer in self.layers:  # Qwen2 has no q/k norm: identities keep the shared forward and no parameters
            layer.self_attn.q_norm, layer.self_attn.k_norm = nn.Identity(), nn.Identity()


class Qwen2Backbone(nn.Module):
    """transformers' `Qwen2ForCausalLM` less its text head: `model.*`. Runs embeddings (text or speech) through
    the layers, reading and writing a static KV cache."""

    def __init__(self, cfg: Qwen2Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.model = Qwen2Model(cfg)

    def embed_text(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [..., T] int64 -> text embeddings [..., T, hidden]."""
        return self.model.embed_tokens(ids)

    def allocate_cache(self, num_rows: int, max_seq_len: int, device: torch.device, dtype: torch.dtype, pool_positions: int | None = None) -> KVCache:
        c = self.cfg
        return KVCache.allocate(c.num_hidden_layers, num_rows, c.num_key_value_heads, max_seq_len, c.head_dim,
                                device, dtype, pool_positions)

    def forward(self, embeds: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor,
                cache: KVCache) -> torch.Tensor:
        """embeds [B, T, hidden], rows [B], positions [B, T] int64 -> every token's final-normed hidden state
        [B, T, hidden] (what the reference's `Qwen2Encoder` returns as `hidden_states[-1]`)."""
        step = Step.build(rows, positions, self.cfg.head_dim, self.cfg.rope_theta, cache, embeds.dtype)
        return self.model(embeds, step, cache)

    def fuse_projections(self) -> None:
        self.model.fuse_projections()
