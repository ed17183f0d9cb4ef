"""A request's random generator from its 64-bit seed, with every bit of the seed counting.

`torch.Generator.manual_seed` keeps all 64 bits on CUDA (Philox takes the seed as its key), but the
CPU generator's mt19937 is seeded from the seed's low 32 bits only: seed 1 and seed 2**32 + 1 gave
the same audio. A CPU seed outside [0, 2**32) therefore fills mt19937's 624-word state from the
whole seed (numpy's SeedSequence); a seed inside it keeps `manual_seed`'s state, so the audio of
every seed that was already distinct stays what it was.
"""
from __future__ import annotations

import numpy as np
import torch

_MT_WORDS = 624  # mt19937's state, in 32-bit words
_MT_STATE_OFFSET = 24  # bytes before the state words in the CPU generator's state (seed, left, seeded, next)
_MT_WORD_BYTES = 8  # each word is stored as a uint64


def seeded_generator(seed: int, device: torch.device | str = "cpu") -> torch.Generator:
    """A generator on `device` whose stream depends on all of `seed` (any int in [-2**63, 2**64))."""
    generator = torch.Generator(device=device).manual_seed(seed)
    if generator.device.type == "cpu" and not 0 <= seed < 2 ** 32:
        _fill_mt19937_state(generator, seed % 2 ** 64)
    return generator


def _fill_mt19937_state(generator: torch.Generator, seed: int) -> None:
    state = generator.get_state()
    words = np.random.SeedSequence(seed).generate_state(_MT_WORDS, np.uint32).astype(np.uint64)
    end = _MT_STATE_OFFSET + _MT_WORDS * _MT_WORD_BYTES
    state[_MT_STATE_OFFSET:end] = torch.from_numpy(words.view(np.uint8).copy())
    generator.set_state(state)  # `left` stays 1, as after manual_seed: the next draw twists this state
