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
    # host-side flags (from the params, no device sync) that skip work no row needs
    any_sampled: bool = True
    any_top_k: bool = True
    any_top_p: bool = True

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
                   generators=generators,
                   any_sampled=not all(p.is_greedy for p in params),
                   any_top_k=any(p.top_k > 0 for p in params),
                   any_top_p=any(p.top_p < 1.0 for p in params))


def apply_repetition_penalty(logits: torch.Tensor, seen: torch.Tensor, penalty: torch.Tensor) -> torch.Tensor:
    """logits: [B, V] float32, seen: [B, V] bool (tokens generated before), penalty: [B, 1].

    Same as HF's RepetitionPenaltyLogitsProcessor, which only depends on the set of seen tokens.
    """
    penalised = torch.where(logits < 0, logits * penalty, logits / penalty)
    return torch.where(seen, penalised, logits)


def top_k(logits: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """logits: [B, V], k: [B, 1] (0 = off) -> logits below each row's k-th largest at -inf."""
    vocab = logits.shape[-1]
    k = torch.where((k <= 0) | (k > vocab), vocab, k)
    descending = logits.sort(dim=-1, descending=True).values
    return logits.masked_fill(logits < descending.gather(-1, k - 1), float("-inf"))


def top_p(logits: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """logits: [B, V], p: [B, 1] -> logits outside each row's nucleus at -inf (HF's TopPLogitsWarper)."""
    ascending, order = logits.sort(dim=-1)
    remove = ascending.softmax(dim=-1).cumsum(dim=-1) <= (1 - p)
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
    if not s.any_sampled:
        return greedy
    warped = logits / s.temperature[:, None]
    warped = top_k(warped, s.top_k) if s.any_top_k else warped
    warped = top_p(warped, s.top_p) if s.any_top_p else warped
    probs = warped.softmax(dim=-1)
    drawn = (probs / exponential_noise(probs.shape, s.generators, probs.device)).argmax(dim=-1)
    return torch.where(s.is_greedy, greedy, drawn)
