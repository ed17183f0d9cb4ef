"""Batched per-row sampling: each row has its own params and its own torch.Generator.

Order as in HF generate: repetition penalty and masks, then (sampling only) temperature, top-k,
top-p. Rows with temperature 0 take the argmax of the penalised, masked logits. Sampling uses the
exponential-race trick (argmax of p / Exp(1) noise, equal in law to multinomial). The noise of a
whole frame (codebook 0 and every predictor step) is drawn up front, one block per sampled row
from that row's own generator (`draw_noise`), so a row's tokens do not depend on its batch
neighbours and the sampling itself needs no generator (it runs inside a CUDA graph).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..base import SamplingParams

TINY = torch.finfo(torch.float32).tiny


@dataclass
class BatchSampling:
    """Per-row sampling settings of one decode batch, as device tensors."""

    temperature: torch.Tensor  # [B] float32, 1.0 where greedy (unused there)
    top_k: torch.Tensor  # [B, 1] int64, clamped to [1, vocab] at use
    top_p: torch.Tensor  # [B, 1] float32
    repetition_penalty: torch.Tensor  # [B, 1] float32
    is_greedy: torch.Tensor  # [B] bool
    # host-side flags (from the params, no device sync) that skip work no row needs; a CUDA graph
    # keeps them all True (the skipped steps are exact identities for the rows that skip them)
    any_sampled: bool = True
    any_top_k: bool = True
    any_top_p: bool = True

    @classmethod
    def build(cls, params: list[SamplingParams], device: torch.device) -> "BatchSampling":
        floats, ints = host_columns(params)
        return cls.from_columns(floats.to(device, non_blocking=True), ints.to(device, non_blocking=True),
                                **host_flags(params))

    @classmethod
    def from_columns(cls, floats: torch.Tensor, ints: torch.Tensor, any_sampled: bool = True,
                     any_top_k: bool = True, any_top_p: bool = True) -> "BatchSampling":
        """floats: [B, 3] (temperature, top_p, penalty), ints: [B, 2] (top_k, is_greedy), see `host_columns`."""
        return cls(temperature=floats[:, 0], top_p=floats[:, 1:2], repetition_penalty=floats[:, 2:3],
                   top_k=ints[:, 0:1], is_greedy=ints[:, 1] != 0, any_sampled=any_sampled,
                   any_top_k=any_top_k, any_top_p=any_top_p)

    def repeat_rows(self, times: int) -> "BatchSampling":
        """Each row's settings `times` times in a row: one row per (batch row, codebook) where a step samples
        several codebooks at once from one head (Higgs Audio's fused audio head)."""
        rep = lambda t: t.repeat_interleave(times, dim=0)  # noqa: E731
        return BatchSampling(rep(self.temperature), rep(self.top_k), rep(self.top_p), rep(self.repetition_penalty),
                             rep(self.is_greedy), self.any_sampled, self.any_top_k, self.any_top_p)


def host_columns(params: list[SamplingParams]) -> tuple[torch.Tensor, torch.Tensor]:
    """-> floats [B, 3] float32, ints [B, 2] int64 on the CPU (one copy each to the device)."""
    floats = [[p.temperature if not p.is_greedy else 1.0, p.top_p, p.repetition_penalty] for p in params]
    ints = [[p.top_k, int(p.is_greedy)] for p in params]
    return torch.tensor(floats, dtype=torch.float32), torch.tensor(ints, dtype=torch.int64)


def host_flags(params: list[SamplingParams]) -> dict[str, bool]:
    return dict(any_sampled=not all(p.is_greedy for p in params), any_top_k=any(p.top_k > 0 for p in params),
                any_top_p=any(p.top_p < 1.0 for p in params))


def draw_noise(out: torch.Tensor, params: list[SamplingParams], generators: list[torch.Generator],
               every_row: bool = False) -> None:
    """Fill row b of out ([>= B, N] float32) with Exp(1) noise from generators[b], for sampled rows only
    (greedy rows keep whatever they hold: `sample` ignores it), or for every row where the frame needs noise
    whatever the sampling (a flow head's starting point). One kernel per drawn row."""
    for row, (p, generator) in enumerate(zip(params, generators)):
        if every_row or not p.is_greedy:
            out[row].exponential_(generator=generator)


def apply_repetition_penalty(logits: torch.Tensor, seen: torch.Tensor, penalty: torch.Tensor) -> torch.Tensor:
    """logits: [B, V] float32, seen: [B, V] bool (tokens generated before), penalty: [B, 1].

    Same as HF's RepetitionPenaltyLogitsProcessor, which only depends on the set of seen tokens.
    """
    penalised = torch.where(logits < 0, logits * penalty, logits / penalty)
    return torch.where(seen, penalised, logits)


def top_k(logits: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """logits: [B, V], k: [B, 1] (0 = off) -> logits below each row's k-th largest at -inf."""
    descending = logits.sort(dim=-1, descending=True).values
    return logits.masked_fill(logits < _kth_largest(descending, k), float("-inf"))


def _kth_largest(descending: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """descending: [B, V] sorted values, k: [B, 1] (0 or past V = off) -> [B, 1] each row's k-th largest."""
    vocab = descending.shape[-1]
    return descending.gather(-1, torch.where((k <= 0) | (k > vocab), vocab, k) - 1)


def top_p(logits: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """logits: [B, V], p: [B, 1] -> logits outside each row's nucleus at -inf (HF's TopPLogitsWarper)."""
    ascending, order = logits.sort(dim=-1)
    return logits.masked_fill(_outside_nucleus(ascending, order, p), float("-inf"))


def _outside_nucleus(ascending: torch.Tensor, order: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """ascending: [B, V] sorted values, order: their indices, p: [B, 1] -> [B, V] bool in vocabulary order."""
    remove = ascending.softmax(dim=-1).cumsum(dim=-1) <= (1 - p)
    remove[:, -1].fill_(False)  # always keep the most likely token (a device fill: graph-safe)
    return remove.scatter(-1, order, remove)


def top_k_top_p(logits: torch.Tensor, k: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """`top_p(top_k(logits, k), p)` with one sort: masking values below the k-th largest keeps the
    descending order, so the top-k logits' ascending order is the reversed sort (ties aside)."""
    descending, order = logits.sort(dim=-1, descending=True)
    kth = _kth_largest(descending, k)
    top = descending.masked_fill(descending < kth, float("-inf"))
    return logits.masked_fill((logits < kth) | _outside_nucleus(top.flip(-1), order.flip(-1), p), float("-inf"))


def sample(logits: torch.Tensor, s: BatchSampling, noise: torch.Tensor) -> torch.Tensor:
    """logits: [B, V] float32 (penalised and masked), noise: [B, V] Exp(1) (>= TINY) -> tokens [B] int64."""
    greedy = logits.argmax(dim=-1)
    if not s.any_sampled:
        return greedy
    warped = logits / s.temperature[:, None]
    if s.any_top_k and s.any_top_p:
        warped = top_k_top_p(warped, s.top_k, s.top_p)
    elif s.any_top_k:
        warped = top_k(warped, s.top_k)
    elif s.any_top_p:
        warped = top_p(warped, s.top_p)
    drawn = (warped.softmax(dim=-1) / noise).argmax(dim=-1)
    return torch.where(s.is_greedy, greedy, drawn)
