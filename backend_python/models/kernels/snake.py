"""SnakeBeta activation, y = x + sin^2(x * a) / b per channel, as one fused pass on CUDA.

Eager PyTorch runs it as five elementwise kernels (mul, sin, pow, mul, add), each reading and
writing the whole activation; in a 24 kHz codec those tensors are the largest of the decoder
(channels x samples), so the activation is memory-bound. The Triton kernel reads x once, computes
in float32 and writes y once. CPU tensors, or a machine without Triton, take the torch expression.
"""
from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only installs: the torch expression below is the reference
    triton = None

BLOCK = 1024


def snake_beta_reference(x: torch.Tensor, alpha: torch.Tensor, inv_beta: torch.Tensor) -> torch.Tensor:
    """x: [B, C, T]; alpha, inv_beta: [C] (already exponentiated / inverted)."""
    return x + inv_beta[None, :, None] * torch.pow(torch.sin(x * alpha[None, :, None]), 2)


def snake_beta(x: torch.Tensor, alpha: torch.Tensor, inv_beta: torch.Tensor) -> torch.Tensor:
    if triton is None or not x.is_cuda or x.dim() != 3 or x.stride(-1) != 1:
        return snake_beta_reference(x, alpha, inv_beta)
    batch, channels, length = x.shape
    y = torch.empty((batch, channels, length), dtype=x.dtype, device=x.device)
    grid = (batch * channels, triton.cdiv(length, BLOCK))
    _snake_kernel[grid](x, alpha.float().contiguous(), inv_beta.float().contiguous(), y, channels, length,
                        x.stride(0), x.stride(1), BLOCK=BLOCK)
    return y


if triton is not None:
    @triton.jit
    def _snake_kernel(x_ptr, alpha_ptr, inv_beta_ptr, y_ptr, channels, length, stride_b, stride_c,
                      BLOCK: tl.constexpr):
        row = tl.program_id(0)  # b * channels + c
        b, c = row // channels, row % channels
        t = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        mask = t < length
        x = tl.load(x_ptr + b * stride_b + c * stride_c + t, mask=mask).to(tl.float32)
        s = tl.sin(x * tl.load(alpha_ptr + c))
        y = x + tl.load(inv_beta_ptr + c) * s * s
        tl.store(y_ptr + row * length + t, y.to(y_ptr.dtype.element_ty), mask=mask)
