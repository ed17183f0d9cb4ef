"""SnakeBeta activation, y = x + sin^2(x * a) / b per channel, as one fused pass on CUDA.

Eager PyTorch runs it as five elementwise kernels (mul, sin, pow, mul, add), each reading and
writing the whole activation; in a 24 kHz codec those tensors are the largest of the decoder
(channels x samples), so the activation is memory-bound. The Triton kernel reads x once, computes
in float32 and writes y once. CPU tensors, or a machine without Triton, take the torch expression.

`snake_beta_log` takes the module's log-scale parameters as they are stored and exponentiates them
inside the kernel: a call is one launch, where exponentiating in torch first adds three or four tiny
kernels (exp, exp, add, reciprocal, and the float casts) to every activation of every codec call.
"""
from __future__ import annotations

import torch

from backend_python.models.kernels import runs_kernels_on

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only installs: the torch expression below is the reference
    triton = None

BLOCK = 1024


def snake_beta_reference(x: torch.Tensor, alpha: torch.Tensor, inv_beta: torch.Tensor) -> torch.Tensor:
    """x: [B, C, T]; alpha, inv_beta: [C] (already exponentiated / inverted)."""
    return x + inv_beta[None, :, None] * torch.pow(torch.sin(x * alpha[None, :, None]), 2)


def _fused(x: torch.Tensor) -> bool:
    """Whether the kernel takes x: Triton for x's device (CUDA, or the CPU under the interpreter), [B, C, T] with
    unit stride along T (a trimmed conv output's other strides are fine)."""
    return triton is not None and runs_kernels_on(x.device) and x.dim() == 3 and x.stride(-1) == 1


def snake_beta(x: torch.Tensor, alpha: torch.Tensor, inv_beta: torch.Tensor) -> torch.Tensor:
    if not _fused(x):
        return snake_beta_reference(x, alpha, inv_beta)
    return _launch(x, alpha.float().contiguous(), inv_beta.float().contiguous(), log_params=False)


def snake_beta_log(x: torch.Tensor, log_alpha: torch.Tensor, log_beta: torch.Tensor) -> torch.Tensor:
    """SnakeBeta from log-scale parameters: alpha = e^log_alpha, 1 / beta = 1 / (e^log_beta + 1e-9)."""
    if not _fused(x) or not (log_alpha.is_contiguous() and log_beta.is_contiguous()):
        return snake_beta_reference(x, torch.exp(log_alpha), 1.0 / (torch.exp(log_beta) + 1e-9))
    return _launch(x, log_alpha, log_beta, log_params=True)


def _launch(x: torch.Tensor, alpha: torch.Tensor, beta: torch.Tensor, log_params: bool) -> torch.Tensor:
    batch, channels, length = x.shape
    y = torch.empty((batch, channels, length), dtype=x.dtype, device=x.device)
    grid = (batch * channels, triton.cdiv(length, BLOCK))
    _snake_kernel[grid](x, alpha, beta, y, channels, length, x.stride(0), x.stride(1), BLOCK=BLOCK,
                        LOG_PARAMS=log_params)
    return y


if triton is not None:
    @triton.jit
    def _snake_kernel(x_ptr, alpha_ptr, beta_ptr, y_ptr, channels, length, stride_b, stride_c,
                      BLOCK: tl.constexpr, LOG_PARAMS: tl.constexpr):
        row = tl.program_id(0)  # b * channels + c
        b, c = row // channels, row % channels
        t = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        mask = t < length
        x = tl.load(x_ptr + b * stride_b + c * stride_c + t, mask=mask).to(tl.float32)
        alpha = tl.load(alpha_ptr + c).to(tl.float32)
        beta = tl.load(beta_ptr + c).to(tl.float32)
        if LOG_PARAMS:  # the module's stored parameters: alpha = e^a, 1 / beta = 1 / (e^b + 1e-9)
            alpha = tl.exp(alpha)
            beta = 1.0 / (tl.exp(beta) + 1e-9)
        s = tl.sin(x * alpha)
        y = x + beta * s * s
        tl.store(y_ptr + row * length + t, y.to(y_ptr.dtype.element_ty), mask=mask)
