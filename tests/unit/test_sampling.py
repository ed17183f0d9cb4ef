"""One sort for top-k and top-p gives what the two warpers give one after the other."""
from __future__ import annotations

import pytest
import torch

from backend_python.models.layers.sampling import top_k, top_k_top_p, top_p


@pytest.mark.parametrize("k", [0, 1, 5, 50, 2048, 4096])
@pytest.mark.parametrize("p", [1e-6, 0.3, 0.9, 1.0])
def test_top_k_top_p_equals_top_p_after_top_k(k, p):
    gen = torch.Generator().manual_seed(k * 31 + int(p * 1000))
    logits = torch.randn(6, 2048, generator=gen) * 3  # continuous values: no ties
    ks = torch.tensor([[k], [k], [0], [k], [1], [k]])
    ps = torch.tensor([[p], [1.0], [p], [p], [p], [0.5]])
    expected = top_p(top_k(logits, ks), ps)
    torch.testing.assert_close(top_k_top_p(logits, ks, ps), expected, rtol=0, atol=0)


def test_top_k_top_p_keeps_at_least_the_most_likely_token():
    logits = torch.randn(3, 100, generator=torch.Generator().manual_seed(1))
    out = top_k_top_p(logits, torch.tensor([[1], [3], [0]]), torch.tensor([[1e-6], [1e-6], [1e-6]]))
    assert torch.equal(torch.isfinite(out).sum(dim=-1), torch.tensor([1, 1, 1]))
    assert torch.equal(out.argmax(dim=-1), logits.argmax(dim=-1))
