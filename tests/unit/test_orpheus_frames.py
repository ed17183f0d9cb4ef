"""The Orpheus frame layout: token ids per slot, and the regrouping of a frame into SNAC levels."""
from __future__ import annotations

import pytest
import torch

from backend_python.models.orpheus.frames import (codes_to_tokens, frames_to_levels, levels_to_frames, slot_token_base,
                                                  tokens_to_codes)
from backend_python.models.orpheus.tokens import CODES_PER_SLOT, FRAME_TOKENS, MIN_VOCAB_SIZE


def random_codes(batch: int, frames: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, CODES_PER_SLOT, (batch, frames, FRAME_TOKENS), generator=generator)


def test_slot_k_code_c_is_token_128266_plus_k_4096_plus_c():
    assert [slot_token_base(k) for k in range(FRAME_TOKENS)] == [128266 + k * 4096 for k in range(7)]
    assert MIN_VOCAB_SIZE == 156938 <= 156940  # the official vocabulary holds every band
    codes = torch.tensor([[[0, 1, 2, 3, 4, 5, 4095]]])
    assert codes_to_tokens(codes).tolist() == [[128266, 132363, 136460, 140557, 144654, 148751, 156937]]


def test_tokens_and_codes_round_trip():
    codes = random_codes(2, 5)
    tokens = codes_to_tokens(codes)  # [2, 35]
    assert tokens.shape == (2, 5 * FRAME_TOKENS)
    assert torch.equal(tokens_to_codes(tokens), codes)


def test_a_token_of_the_wrong_slot_is_rejected():
    tokens = codes_to_tokens(random_codes(1, 2))
    tokens[0, 3] = slot_token_base(2)  # slot 3 holding a slot-2 token
    with pytest.raises(ValueError, match="slot"):
        tokens_to_codes(tokens)


def test_levels_follow_the_reference_regrouping():
    """canopylabs' decoder: level 0 = [f0], level 1 = [f1, f4], level 2 = [f2, f3, f5, f6] per frame."""
    codes = random_codes(2, 4, seed=1)
    levels = frames_to_levels(codes)
    assert [tuple(level.shape) for level in levels] == [(2, 4), (2, 8), (2, 16)]
    for b in range(2):
        for t in range(4):
            f = codes[b, t].tolist()
            assert levels[0][b, t].item() == f[0]
            assert levels[1][b, 2 * t:2 * t + 2].tolist() == [f[1], f[4]]
            assert levels[2][b, 4 * t:4 * t + 4].tolist() == [f[2], f[3], f[5], f[6]]


def test_levels_round_trip():
    codes = random_codes(3, 6, seed=2)
    assert torch.equal(levels_to_frames(frames_to_levels(codes)), codes)
