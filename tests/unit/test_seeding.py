"""Every bit of a request's seed reaches its generator (the CPU generator seeds from 32 bits)."""
from __future__ import annotations

import pytest
import torch

from backend_python.models.layers.seeding import seeded_generator


def draws(seed: int) -> list[float]:
    noise = torch.empty(16)
    noise.exponential_(generator=seeded_generator(seed))  # as draw_noise samples
    return noise.tolist()


@pytest.mark.parametrize("seed, alias", [(1, 2 ** 32 + 1), (0, 2 ** 62), (2 ** 32 - 1, -1), (5, -(2 ** 63) + 5)])
def test_seeds_that_share_their_low_32_bits_give_different_noise(seed, alias):
    assert draws(seed) != draws(alias)


@pytest.mark.parametrize("seed", [0, 1, 42, 2 ** 32 - 1])
def test_a_32_bit_seed_keeps_the_noise_it_always_had(seed):
    expected = torch.empty(16).exponential_(generator=torch.Generator().manual_seed(seed)).tolist()
    assert draws(seed) == expected


@pytest.mark.parametrize("seed", [2 ** 32 + 1, 2 ** 63 - 1, -(2 ** 63)])
def test_a_wide_seed_is_deterministic(seed):
    assert draws(seed) == draws(seed)
