"""The depth decoder (`depth_decoder.*`): codebooks 1..K-1 of a frame, one small step each.

Per frame its input sequence is [backbone hidden state, embedding of code 0, of code 1, ...], all
in the backbone's width and projected to its own (`inputs_embeds_projector`); position p's output
predicts codebook p with `codebooks_head.weight[p - 1]`. Code k is embedded at row
k * vocab_size + code of `model.embed_tokens` (the backbone's audio table when tied). It keeps its
own tiny cache of K positions per row, rewritten for every frame.
"""
from __future__ import annotations

import torch
from torch import nn

from ..layers.decoder import KVCache, Step
from ..layers.sampling import BatchSampling, sample
from .config import DepthDecoderConfig
from .layers import LlamaStack


class DepthDecoderModel(LlamaStack):
    def __init__(self, cfg: DepthDecoderConfig) -> None:
        super().__init__(cfg.shape)
        self.embed_tokens = nn.Embedding(cfg.num_codebooks * cfg.vocab_size, cfg.backbone_hidden_size)
        self.inputs_embeds_projector = nn.Linear(cfg.backbone_hidden_size, cfg.shape.hidden_size, bias=False)


class CodebooksHead(nn.Module):
    """`depth_decoder.codebooks_head`: weight [K-1, hidden, vocab], one projection per codebook 1..K-1."""

    def __init__(self, num_codebooks: int, hidden_size: int, vocab_size: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_codebooks - 1, hidden_size, vocab_size))

    def forward(self, hidden: torch.Tensor, codebook: int) -> torch.Tensor:
        """hidden: [B, hidden] -> logits of `codebook` (1..K-1): [B, vocab] float32."""
        return (hidden @ self.weight[codebook - 1]).float()


class DepthDecoder(nn.Module):
    def __init__(self, cfg: DepthDecoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.model = DepthDecoderModel(cfg)
        self.codebooks_head = CodebooksHead(cfg.num_codebooks, cfg.shape.hidden_size, cfg.vocab_size)

    def allocate_cache(self, num_rows: int, device: torch.device, dtype: torch.dtype) -> KVCache:
        return self.model.allocate_cache(num_rows, self.cfg.num_codebooks, device, dtype)

    def embed(self, codes: torch.Tensor, codebook: int) -> torch.Tensor:
        """codes: [B] int64 of one codebook -> [B, backbone_hidden]."""
        return self.model.embed_tokens(codes + codebook * self.cfg.vocab_size)

    def forward(self, embeds: torch.Tensor, step: Step, cache: KVCache) -> torch.Tensor:
        """embeds: [B, T, backbone_hidden] -> last hidden [B, hidden] (normed)."""
        return self.model(self.model.inputs_embeds_projector(embeds), step, cache)[:, -1]

    def frame_step(self, batch_size: int, cache: KVCache, device: torch.device, dtype: torch.dtype) -> Step:
        """RoPE and mask for all K positions of a frame, built once and windowed per step."""
        rows = torch.arange(batch_size, device=device)
        positions = torch.arange(self.cfg.num_codebooks, device=device).expand(batch_size, -1)  # [B, K]
        return self.model.step(rows, positions, cache, dtype)

    def generate(self, backbone_hidden: torch.Tensor, code0: torch.Tensor, cache: KVCache, sampling: BatchSampling,
                 noise: torch.Tensor, blocked: torch.Tensor) -> torch.Tensor:
        """backbone_hidden: [B, backbone_hidden], code0: [B], noise: [B, K-1, vocab] Exp(1),
        blocked: [vocab] bool (ids never sampled) -> codes of codebooks 1..K-1: [B, K-1] int64.

        Batch row b uses cache row b. No host sync: the whole loop is one CUDA graph on the GPU path."""
        x = torch.stack((backbone_hidden, self.embed(code0, 0)), dim=1)  # [B, 2, backbone_hidden]
        frame = self.frame_step(x.shape[0], cache, x.device, x.dtype)
        codes = []
        for codebook in range(1, self.cfg.num_codebooks):
            step = frame.window(0, 2) if codebook == 1 else frame.window(codebook, codebook + 1)
            logits = self.codebooks_head(self(x, step, cache), codebook).masked_fill(blocked, float("-inf"))
            codes.append(sample(logits, sampling, noise[:, codebook - 1]))  # [B]
            x = self.embed(codes[-1], codebook)[:, None]
        return torch.stack(codes, dim=1)
