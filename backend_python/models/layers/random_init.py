"""Deterministic random weights for tiny test models (no checkpoint download, no HF init)."""
from __future__ import annotations

import torch
from torch import nn

from .decoder import RMSNorm


@torch.no_grad()
def init_random_weights(model: nn.Module, seed: int, matrices: tuple[type[nn.Module], ...] = ()) -> None:
    """Deterministic init in module order: N(0, 1/fan_in) matrices, N(0, 1) embeddings, zero biases,
    unit norms. Unit-scale activations (unlike HF's N(0, 0.02)) make a random model's output depend
    on its prompt, so tests can tell requests apart.

    matrices: further module types whose `weight` [..., fan_in, out] is drawn like a linear's.
    """
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed)
    for module in model.modules():
        if isinstance(module, nn.Linear):
            module.weight.normal_(0.0, module.in_features ** -0.5, generator=generator)
        if isinstance(module, nn.Embedding):
            module.weight.normal_(0.0, 1.0, generator=generator)
        if isinstance(module, matrices):
            module.weight.normal_(0.0, module.weight.shape[-2] ** -0.5, generator=generator)
        if isinstance(module, nn.Linear) and module.bias is not None:
            module.bias.zero_()
        if isinstance(module, RMSNorm):
            module.weight.fill_(1.0)
