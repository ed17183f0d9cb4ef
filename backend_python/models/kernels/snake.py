"""SnakeBeta activation, y = x + sin^2(x * a) / b per channel, as one fused pass on CUDA.

Eager PyTorch runs it as five elementwise kernels (mul, sin, pow, mul, add), each reading and
writing the whole activation; in a 24 kHz codec those tensors are the largest of the decoder
(channels x samples), so the activation is memory-bound. The Triton kernel reads x once, computes
in float32 and writes y once. CPU tensors, or a machine without Triton, take the torch expression.

`snake_beta_log` takes the module's log-scale parameters as they are stored and exponentiates them
inside the kernel: a call is one launch, where exponentiating in torch first adds three or four tiny
kernels (exp, exp, add, reciprocal, and the float casts) to every activation of every codec call.

`snake_beta_fused` also takes the elementwise passes around an activation into it: the bias of the
convolution in front (`bias`: the activation of x + bias, the convolution run without one), and a
second output `x + shift` for the residual stream behind (a residual unit's base with its last
convolution's bias in it, which a GEMM then adds into: `codec_layers.ResidualUnit`).
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


def runs_kernel(x: torch.Tensor) -> bool:
    """Whether the kernel takes x: Triton for x's device (CUDA, or the CPU under the interpreter), [B, C, T] with
    unit stride along T (a trimmed conv output's other strides are fine)."""
    return triton is not None and runs_kernels_on(x.device) and x.dim() == 3 and x.stride(-1) == 1


def snake_beta(x: torch.Tensor, alpha: torch.Tensor, inv_beta: torch.Tensor) -> torch.Tensor:
    if not runs_kernel(x):
        return snake_beta_reference(x, alpha, inv_beta)
    return _launch(x, alpha.float().contiguous(), inv_beta.float().contiguous(), log_params=False)[0]


def snake_beta_log(x: torch.Tensor, log_alpha: torch.Tensor, log_beta: torch.Tensor) -> torch.Tensor:
    """SnakeBeta from log-scale parameters: alpha = e^log_alpha, 1 / beta = 1 / (e^log_beta + 1e-9)."""
    return snake_beta_fused(x, log_alpha, log_beta)[0]


def snake_beta_fused(x: torch.Tensor, log_alpha: torch.Tensor, log_beta: torch.Tensor,
                     bias: torch.Tensor | None = None,
                     shift: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(SnakeBeta of x + bias, x + bias + shift or None), bias and shift [C] per channel (None: none), in one pass
    where the kernel runs (`runs_kernel`); elsewhere the same in torch."""
    if not runs_kernel(x) or not all(p is None or p.is_contiguous() for p in (log_alpha, log_beta, bias, shift)):
        pre = x if bias is None else x + bias[None, :, None]
        activated = snake_beta_reference(pre, torch.exp(log_alpha), 1.0 / (torch.exp(log_beta) + 1e-9))
        return activated, (None if shift is None else pre + shift[None, :, None])
    return _launch(x, log_alpha, log_beta, log_params=True, bias=bias, shift=shift)


def _launch(x: torch.Tensor, alpha: torch.Tensor, beta: torch.Tensor, log_params: bool,
            bias: torch.Tensor | None = None,
            shift: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(y, x + bias + shift), the second None without a shift."""
    batch, channels, length = x.shape
    y = torch.empty((batch, channels, length), dtype=x.dtype, device=x.device)
    shifted = torch.empty_like(y) if shift is not None else None
    grid = (batch * channels, triton.cdiv(length, BLOCK))
    _snake_kernel[grid](x, alpha, beta, alpha if bias is None else bias, alpha if shift is None else shift, y,
                        y if shifted is None else shifted, channels, length, x.stride(0), x.stride(1), BLOCK=BLOCK,
                        LOG_PARAMS=log_params, HAS_BIAS=bias is not None, HAS_SHIFT=shift is not None)
    return y, shifted


if triton is not None:
    @triton.jit
    def _snake_kernel(x_ptr, alpha_ptr, beta_ptr, bias_ptr, shift_ptr, y_ptr, shifted_ptr, channels, length,
                      stride_b, stride_c, BLOCK: tl.constexpr, LOG_PARAMS: tl.constexpr, HAS_BIAS: tl.constexpr,
                      HAS_SHIFT: tl.constexpr):
        row = tl.program_id(0)  # b * channels + c
        b, c = row // channels, row % channels
        t = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        mask = t < length
        x = tl.load(x_ptr + b * stride_b + c * stride_c + t, mask=mask).to(tl.float32)
        if HAS_BIAS:  # the convolution in front ran without its bias
            x = x + tl.load(bias_ptr + c).to(tl.float32)
        if HAS_SHIFT:  # the residual stream behind: x + shift, rounded once
            shifted = x + tl.load(shift_ptr + c).to(tl.float32)
            tl.store(shifted_ptr + row * length + t, shifted.to(shifted_ptr.dtype.element_ty), mask=mask)
        alpha = tl.load(alpha_ptr + c).to(tl.float32)
        beta = tl.load(beta_ptr + c).to(tl.float32)
        if LOG_PARAMS:  # the module's stored parameters: alpha = e^a, 1 / beta = 1 / (e^b + 1e-9)
            alpha = tl.exp(alpha)
            beta = 1.0 / (tl.exp(beta) + 1e-9)
        s = tl.sin(x * alpha)
        y = x + beta * s * s
        tl.store(y_ptr + row * length + t, y.to(y_ptr.dtype.element_ty), mask=mask)
