"""The Orpheus frame layout: one audio frame = 7 LM tokens (their ids: tokens.py), and how a frame maps onto SNAC's levels.

Orpheus extends Llama-3's 128256-token vocabulary with control tokens and 7 bands of 4096 audio
tokens. Slot k (0..6) of a frame may only be token `AUDIO_TOKEN_BASE + k * CODES_PER_SLOT + code`;
`END_OF_SPEECH` may only take the place of a frame's slot 0. SNAC 24 kHz has three levels at
strides 4, 2 and 1 (one, two and four codes per 2048-sample frame); a frame's 7 codes interleave
them as [l0, l1, l2, l2, l1, l2, l2]:

    level 0: [c0]    level 1: [c1, c4]    level 2: [c2, c3, c5, c6]
"""
from __future__ import annotations

import torch

from .tokens import AUDIO_TOKEN_BASE, CODES_PER_SLOT, FRAME_TOKENS

LEVEL_SLOTS = ((0,), (1, 4), (2, 3, 5, 6))  # frame slots of each SNAC level, in time order


def slot_token_base(slot: int) -> int:
    """The token id of code 0 in frame slot `slot`."""
    return AUDIO_TOKEN_BASE + slot * CODES_PER_SLOT


def tokens_to_codes(tokens: torch.Tensor) -> torch.Tensor:
    """tokens: [..., T * 7] LM audio token ids, frame-aligned -> codes [..., T, 7] in [0, 4096).

    Raises ValueError when a token is not the audio token of its slot."""
    frames = tokens.reshape(*tokens.shape[:-1], -1, FRAME_TOKENS)
    codes = frames - torch.tensor([slot_token_base(k) for k in range(FRAME_TOKENS)], device=tokens.device)
    if codes.numel() and (codes.min() < 0 or codes.max() >= CODES_PER_SLOT):
        raise ValueError("a token is not an audio token of its frame slot")
    return codes


def codes_to_tokens(codes: torch.Tensor) -> torch.Tensor:
    """codes: [..., T, 7] in [0, 4096) -> LM token ids [..., T * 7]."""
    bases = torch.tensor([slot_token_base(k) for k in range(FRAME_TOKENS)], device=codes.device)
    return (codes + bases).flatten(-2)


def frames_to_levels(codes: torch.Tensor) -> list[torch.Tensor]:
    """codes: [B, T, 7] -> SNAC codes per level: [B, T], [B, 2T], [B, 4T] (time order within a frame)."""
    return [codes[:, :, list(slots)].flatten(1) for slots in LEVEL_SLOTS]


def levels_to_frames(levels: list[torch.Tensor]) -> torch.Tensor:
    """The inverse of `frames_to_levels`: [B, T], [B, 2T], [B, 4T] -> [B, T, 7]."""
    batch, num_frames = levels[0].shape
    codes = torch.empty(batch, num_frames, FRAME_TOKENS, dtype=levels[0].dtype, device=levels[0].device)
    for slots, level in zip(LEVEL_SLOTS, levels):
        codes[:, :, list(slots)] = level.reshape(batch, num_frames, len(slots))
    return codes
