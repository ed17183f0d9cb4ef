"""Batched per-row sampling: each row has its own params and its own torch.Generator.

Order as in HF generate: repetition penalty and masks, then (sampling only) temperature, top-k,
top-p. Rows with temperature 0 take the argmax of the penalised, masked logits. Sampling uses the
exponential-race trick (argmax of p / Exp(1) noise, equal in law to multinomial) so each row draws
its noise from its own generator and its tokens do not depend on its batch neighbours.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..base import SamplingParams


@dataclass
class BatchSampling:
    """Per-row sampling settings of one decode batch, as device tensors."""

    temperature: torch.Tensor  # [B] float32, 1.0 where greedy (unused there)
    top_k: torch.Tensor  # [B, 1] int64, clamped to [1, vocab] at use
    top_p: torch.Tensor  # [B, 1] float32
    repetition_penalty: torch.Tensor  # [B, 1] float32
    is_greedy: torch.Tensor  # [B] bool
    generators: list[torch.Generator]

    @classmethod
    def build(cls, params: list[SamplingParams], generators: list[torch.Generator],
              device: torch.device) -> "BatchSampling":
        def col(values: list, dtype: torch.dtype) -> torch.Tensor:
            return torch.tensor(values, dtype=dtype).to(device, non_blocking=True)

        return cls(temperature=col([p.temperature if not p.is_greedy else 1.0 for p in params], torch.float32),
                   top_k=col([[p.top_k] for p in params], torch.int64),
                   top_p=col([[p.top_p] for p in params], torch.float32),
                   repetition_penalty=col([[p.repetition_penalty] for p in params], torch.float32),
                   is_greedy=col([p.is_greedy for p in params], torch.bool),
                   generators=generators)


def apply_repetition_penalty(logits: torch.Tensor, seen: torch.Tensor, penalty: torch.Tensor) -> torch.Tensor:
    """logits: [B, V] float32, seen: [B, V] bool (tokens generated before), penalty: [B, 1].

    Same as HF's RepetitionPenaltyLogitsProcessor, which only depends on the set of seen tokens.
    """
    penalised = torch.where(logits < 0, logits * penalty, logits / penalty)
    return torch.where(seen, penalised, logits)


def top_k_top_p(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """logits: [B, V] (already divided by temperature) -> logits with filtered entries at -inf."""
    vocab = logits.shape[-1]
    k = torch.where((top_k <= 0) | (top_k > vocab), vocab, top_k)  # [B, 1]
    descending = logits.sort(dim=-1, descending=True).values
    logits = logits.masked_fill(logits < descending.gather(-1, k - 1), float("-inf"))
    ascending, order = logits.sort(dim=-1)
    remove = ascending.softmax(dim=-1).cumsum(dim=-1) <= (1 - top_p)
    remove[:, -1] = False  # always keep the most likely token
    return logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))


def exponential_noise(shape: torch.Size, generators: list[torch.Generator], device: torch.device) -> torch.Tensor:
    """One row of Exp(1) noise per generator: [B, V] float32."""
    rows = [torch.empty(shape[-1], device=device).exponential_(generator=g) for g in generators]
    # a zero draw would turn a zero-probability token into 0/0 = NaN, which argmax picks
    return torch.stack(rows).clamp_min_(torch.finfo(torch.float32).tiny)


def sample(logits: torch.Tensor, s: BatchSampling) -> torch.Tensor:
    """logits: [B, V] float32 (penalised and masked) -> tokens [B] int64."""
    greedy = logits.argmax(dim=-1)
    warped = top_k_top_p(logits / s.temperature[:, None], s.top_k, s.top_p)
    probs = warped.softmax(dim=-1)
    drawn = (probs / exponential_noise(probs.shape, s.generators, probs.device)).argmax(dim=-1)
    return torch.where(s.is_greedy, greedy, drawn)
