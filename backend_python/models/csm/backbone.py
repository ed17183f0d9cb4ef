"""The backbone (`backbone_model.*`): a Llama stack over text embeddings (prompt) and summed
codebook embeddings (one per generated frame). Its `lm_head` and `embed_text_tokens` sit at the
checkpoint's root, so they belong to `CsmLM`."""
from __future__ import annotations

import torch
from torch import nn

from ..layers.decoder import KVCache
from .config import CsmConfig
from .layers import LlamaStack


class BackboneEmbeddings(nn.Module):
    """`backbone_model.embed_tokens`: one table for all codebooks, codebook k at rows k * vocab_size..."""

    def __init__(self, num_codebooks: int, vocab_size: int, hidden_size: int) -> None:
        super().__init__()
        self.embed_audio_tokens = nn.Embedding(num_codebooks * vocab_size, hidden_size)
        self.vocab_size = vocab_size

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        """codes: [B, K] int64 -> the frame's input embedding [B, hidden] (sum over codebooks)."""
        # offsets made here, not held as a buffer: a checkpoint has no such tensor to load from `meta`
        offsets = torch.arange(codes.shape[1], device=codes.device) * self.vocab_size
        return self.embed_audio_tokens(codes + offsets).sum(dim=1)


class BackboneModel(LlamaStack):
    def __init__(self, cfg: CsmConfig) -> None:
        super().__init__(cfg.backbone)
        self.embed_tokens = BackboneEmbeddings(cfg.num_codebooks, cfg.vocab_size, cfg.backbone.hidden_size)

    def run(self, embeds: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor,
            cache: KVCache) -> torch.Tensor:
        """embeds: [B, T, hidden], rows: [B], positions: [B, T] -> last hidden state [B, hidden] (normed)."""
        return self(embeds, self.step(rows, positions, cache, embeds.dtype), cache)[:, -1]
