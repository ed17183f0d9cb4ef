"""The rules of one guided Zonos step after its logits, as the reference applies them (`model.generate`,
`sampling.py`): the repetition penalty over each codebook's last fed rows, only codebook 0 ending the speech, each
codebook sampled with its row's settings, and the delayed row fed back next. Device ops only (no host sync)."""
from __future__ import annotations

import torch

from ..layers.sampling import BatchSampling
from .config import ZonosConfig

NO_END = 2 ** 62  # `end_step` of a stream whose codebook 0 has not ended


def penalise(logits: torch.Tensor, window: torch.Tensor, penalty: torch.Tensor) -> torch.Tensor:
    """The reference's repetition penalty: logits [B, K, V], window [B, K, W] (each codebook's last W fed codes),
    penalty [B, 1] -> a code seen n times in the window has its logit divided (or, <= 0, multiplied) by
    penalty^n. Codes past the head (masked) are not penalised."""
    b, k, v = logits.shape
    seen = window.clamp(max=v)  # masked -> the dropped column v
    factors = torch.ones(b, k, v + 1, device=logits.device).scatter_reduce(
        2, seen, penalty[:, :, None].expand(b, k, window.shape[2]).float(), reduce="prod")[..., :v]
    return torch.where(logits <= 0, logits * factors, logits / factors)


def per_codebook(s: BatchSampling, k: int) -> BatchSampling:
    """Each row's sampling settings for its k codebooks: rows b * k .. b * k + k - 1."""
    return BatchSampling(temperature=s.temperature.repeat_interleave(k), top_k=s.top_k.repeat_interleave(k, dim=0),
                         top_p=s.top_p.repeat_interleave(k, dim=0),
                         repetition_penalty=s.repetition_penalty.repeat_interleave(k, dim=0),
                         is_greedy=s.is_greedy.repeat_interleave(k), any_sampled=s.any_sampled,
                         any_top_k=s.any_top_k, any_top_p=s.any_top_p)


def mask_eos(logits: torch.Tensor, eos: int, is_eos_blocked: torch.Tensor) -> torch.Tensor:
    """logits [B, K, V]: only codebook 0 may end the speech, and not in a row that ignores EOS (is_eos_blocked [B])."""
    blocked = torch.ones_like(logits[:, :, eos], dtype=torch.bool)
    blocked[:, 0] = is_eos_blocked
    logits[:, :, eos] = logits[:, :, eos].masked_fill(blocked, float("-inf"))
    return logits


def delayed_row(codes: torch.Tensor, steps: torch.Tensor, ended: torch.Tensor, config: ZonosConfig) -> torch.Tensor:
    """codes [B, K] sampled at steps [B] -> the row fed next: codebook j holds frame steps - j; `masked` before
    frame 0 and past the end frame, `eos` at it (ended [B]: the end step, NO_END if none)."""
    frames = steps[:, None] - torch.arange(codes.shape[1], device=codes.device)  # [B, K]
    row = codes.masked_fill(frames == ended[:, None], config.eos_token_id)
    return row.masked_fill((frames < 0) | (frames > ended[:, None]), config.masked_token_id)
