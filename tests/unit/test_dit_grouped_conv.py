"""The DiT's grouped position conv as a batched matmul (the CUDA path) equals `F.conv1d` with groups."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from backend_python.models.layers.dit import grouped_conv1d


@pytest.mark.parametrize("batch, channels, frames, kernel, groups", [
    (2, 1024, 128, 31, 16),  # CosyVoice 3's DiT: a window of 64 tokens, its guidance doubling the rows
    (3, 64, 20, 5, 4),
    (1, 32, 1, 3, 32),  # one output frame, depthwise
])
@pytest.mark.parametrize("with_bias", [True, False])
def test_the_batched_matmul_is_the_grouped_conv(batch, channels, frames, kernel, groups, with_bias):
    generator = torch.Generator().manual_seed(batch * 1000 + channels)
    x = torch.randn(batch, channels, frames + kernel - 1, generator=generator)
    fan_in = channels // groups * kernel
    weight = torch.randn(channels, channels // groups, kernel, generator=generator) * fan_in ** -0.5
    bias = torch.randn(channels, generator=generator) if with_bias else None
    expected = F.conv1d(x, weight, bias, groups=groups)
    got = grouped_conv1d(x, weight, bias, groups)
    assert got.shape == expected.shape == (batch, channels, frames)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
