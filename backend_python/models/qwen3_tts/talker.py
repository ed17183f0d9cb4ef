"""The talker: module and parameter names follow the official checkpoint (`talker.*`)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..layers.decoder import DecoderStack, KVCache, Step
from .code_predictor import CodePredictor
from .config import TalkerConfig


class TalkerModel(DecoderStack):
    """`talker.model`: decoder layers plus the codec and text embedding tables."""

    def __init__(self, cfg: TalkerConfig) -> None:
        super().__init__(cfg.num_hidden_layers, cfg.hidden_size, cfg.intermediate_size, cfg.num_attention_heads,
                         cfg.num_key_value_heads, cfg.head_dim, cfg.rms_norm_eps)
        self.codec_embedding = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.text_embedding = nn.Embedding(cfg.text_vocab_size, cfg.text_hidden_size)


class TextProjection(nn.Module):
    """`talker.text_projection`: text_hidden -> text_hidden -> hidden MLP with biases."""

    def __init__(self, text_hidden_size: int, hidden_size: int) -> None:
        super().__init__()
        self.linear_fc1 = nn.Linear(text_hidden_size, text_hidden_size, bias=True)
        self.linear_fc2 = nn.Linear(text_hidden_size, hidden_size, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_fc2(F.silu(self.linear_fc1(x)))


class Talker(nn.Module):
    """`talker`: the backbone LM that emits codebook 0, owning the code predictor."""

    def __init__(self, cfg: TalkerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.model = TalkerModel(cfg)
        self.text_projection = TextProjection(cfg.text_hidden_size, cfg.hidden_size)
        self.codec_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.code_predictor = CodePredictor(cfg.code_predictor, cfg.hidden_size)

    def embed_text(self, ids: torch.Tensor) -> torch.Tensor:
        """ids: [..., T] int64 -> [..., T, hidden]."""
        return self.text_projection(self.model.text_embedding(ids))

    def embed_codec(self, ids: torch.Tensor) -> torch.Tensor:
        """ids: [..., T] int64 (talker codec vocab) -> [..., T, hidden]."""
        return self.model.codec_embedding(ids)

    def allocate_cache(self, num_rows: int, max_seq_len: int, device: torch.device,
                       dtype: torch.dtype, pool_positions: int | None = None) -> KVCache:
        c = self.cfg
        return KVCache.allocate(c.num_hidden_layers, num_rows, c.num_key_value_heads, max_seq_len, c.head_dim,
                                device, dtype, pool_positions)

    def forward(self, embeds: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor,
                cache: KVCache, last: torch.Tensor | None = None, compiled: bool = True) -> torch.Tensor:
        """embeds: [B, T, hidden], rows: [B], positions: [B, T] -> the hidden state [B, hidden] (normed) at
        each row's `last` index ([B] int64, a right-padded prefill), or at the last token."""
        step = Step.build(rows, positions, self.cfg.head_dim, self.cfg.rope_theta, cache, embeds.dtype)
        hidden = self.model(embeds, step, cache, compiled)  # [B, T, hidden]
        if last is None:
            return hidden[:, -1]
        return hidden.gather(1, last[:, None, None].expand(-1, 1, hidden.shape[-1]))[:, 0]

    def fuse_projections(self) -> None:
        """Fused q/k/v and gate/up weights in the talker and the predictor (the CUDA layout)."""
        self.model.fuse_projections()
        self.code_predictor.model.fuse_projections()

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden: [B, hidden] -> codebook-0 logits [B, vocab] float32."""
        return self.codec_head(hidden).float()
