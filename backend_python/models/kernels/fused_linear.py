"""A decoder layer's projections as Triton matmuls with their neighbours fused in: RMSNorm before, SwiGLU,
bias and the residual add after.

A decode step's projections are weight reads: a Qwen3-TTS-1.7B frame reads 5.3 GB of weights for at most
128 rows, and cuBLAS's kernels for so few rows read them at 1.0-1.7 TB/s of an H200's 4.3 (BENCHMARKS.md,
"Where an LM frame's time goes"), with the norms, the SwiGLU and the residual adds as kernels of their own
between them. `fused_linear` computes, in one launch (two with split-K),

    y = act(rms_norm(x) @ W^T + bias) + residual

with each part optional: `norm_weight` (RMSNorm of x's rows before the product, the layer's input or post-
attention norm), `swiglu` (W holds gate rows then up rows, y = silu(gate) * up: the MLP's first half), `bias`,
`residual`. The rounding follows the PyTorch layer on CUDA: the norm's output, the product, silu(gate) and the
residual sum are each rounded to the input's dtype once, as the separate kernels would. Split-K (`Launch.split_k`)
writes float32 partial products that a second kernel sums in a fixed order (deterministic: no atomics) and
finishes; it gives a narrow output (N = 1024) enough programs to read its weights at full bandwidth.

`Fp8Weight` (weights in float8 e4m3 with a scale per output row, quantised at load: `quantize_fp8`) halves the bytes
a call reads: the kernel widens each weight tile to the activations' dtype in registers (exact: every e4m3 value is a
bf16 value) and scales the products per output before the epilogue. It changes the model's numbers (the weights are
rounded to 3 mantissa bits), so it is off by default, behind `voxlane serve --fp8-weights`.

The launch (`launch_for`) is chosen per shape; `server/microbench/fused_linear.py` times the candidates on a
GPU. Rows past `MAX_KERNEL_ROWS` run PyTorch's kernels (cuBLAS is fast once rows reuse each weight tile), so
`fused_linear` is the same function for any batch. Runs on CUDA, and on the CPU under Triton's interpreter
(`TRITON_INTERPRET=1`, for tests); elsewhere PyTorch's kernels.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from . import is_interpreted, runs_kernels_on

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only installs: PyTorch's kernels
    triton = None

# rows up to which the Triton kernel runs; more rows take cuBLAS (VOXLANE_FUSED_LINEAR_MAX_ROWS overrides). 16: on an
# H100 cuBLAS took every projection of the frame in 125 µs at 32 rows and 131 at 128 against the kernel's 156 and
# 266, and tied it at one row (BENCHMARKS.md, "The frame on fused Triton kernels"); between 1 and 32 rows the
# crossover is not measured yet
MAX_KERNEL_ROWS = int(os.environ.get("VOXLANE_FUSED_LINEAR_MAX_ROWS", "16"))
TARGET_PROGRAMS = 264  # two programs per SM of an H100/H200 (132 SMs): enough reads in flight for the bandwidth


@dataclass(frozen=True)
class Launch:
    """Tile sizes, K split and warps of one call (block_m, block_n, block_k powers of two >= 16)."""

    block_m: int
    block_n: int
    block_k: int
    split_k: int = 1
    num_warps: int = 4
    num_stages: int = 4

    def __post_init__(self) -> None:
        for name in ("block_m", "block_n", "block_k"):
            value = getattr(self, name)
            if value < 16 or value & (value - 1):
                raise ValueError(f"{name} must be a power of two >= 16, got {value}")
        if self.split_k < 1 or self.num_warps not in (1, 2, 4, 8, 16) or self.num_stages < 1:
            raise ValueError(f"split_k >= 1, num_warps in 1..16 (powers of two), num_stages >= 1: {self}")

    @classmethod
    def parse(cls, text: str) -> "Launch":
        """`BM,BN,BK,SPLIT,WARPS,STAGES` (VOXLANE_FUSED_LINEAR_LAUNCH; the microbench's tuning knob)."""
        try:
            return cls(*(int(value) for value in text.split(",")))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"a fused_linear launch is BM,BN,BK,SPLIT,WARPS,STAGES, got {text!r}: {exc}") from None


FORCED_LAUNCH = Launch.parse(os.environ["VOXLANE_FUSED_LINEAR_LAUNCH"]) if os.environ.get(
    "VOXLANE_FUSED_LINEAR_LAUNCH") else None


@dataclass(frozen=True)
class Fp8Weight:
    """A projection's weight as float8 e4m3 with one float32 scale per output row: W ~ data * scale[:, None]."""

    data: torch.Tensor  # [N, K] float8_e4m3fn
    scale: torch.Tensor  # [N] float32

    @property
    def shape(self) -> torch.Size:
        return self.data.shape

    def dequantize(self, dtype: torch.dtype) -> torch.Tensor:
        """[N, K] in dtype (each product rounded once, as the kernel's float32 scaling is then)."""
        return (self.data.float() * self.scale[:, None]).to(dtype)


FP8_MAX = 448.0  # the largest finite float8 e4m3fn


def quantize_fp8(weight: torch.Tensor) -> Fp8Weight:
    """Per output row: scale = max |row| / 448, data = row / scale rounded to e4m3 (round to nearest)."""
    scale = (weight.float().abs().amax(dim=1) / FP8_MAX).clamp_min(torch.finfo(torch.float32).tiny)
    return Fp8Weight((weight.float() / scale[:, None]).to(torch.float8_e4m3fn), scale)


def launch_for(m: int, n: int, k: int) -> Launch:
    """The launch for m rows, n outputs (SwiGLU: n = the intermediate size), k inputs: the fewest rows a tile
    can hold, then a K split until the tiles fill the GPU (each part keeps at least two K blocks)."""
    if FORCED_LAUNCH is not None:
        return FORCED_LAUNCH
    block_m = 16 if m <= 16 else 32 if m <= 32 else 64
    block_n = 64 if m <= 32 else 128
    block_k = 128 if m <= 32 else 64
    tiles = -(-m // block_m) * -(-n // block_n)
    split = 1
    while tiles * split * 2 <= TARGET_PROGRAMS and k % (block_k * split * 2) == 0 and k // (split * 2) >= 2 * block_k:
        split *= 2
    # 64 x 128 float32 accumulators (two with SwiGLU) want 8 warps' registers
    return Launch(block_m, block_n, block_k, split, num_warps=4 if m <= 32 else 8, num_stages=4 if m <= 32 else 3)


def is_available(device: torch.device) -> bool:
    """Whether the kernel runs for tensors on `device`: CUDA with Triton, or the CPU under Triton's interpreter."""
    return triton is not None and runs_kernels_on(device)


def fused_linear_reference(x: torch.Tensor, weight: torch.Tensor | Fp8Weight, norm_weight: torch.Tensor | None = None,
                           eps: float = 0.0, bias: torch.Tensor | None = None, residual: torch.Tensor | None = None,
                           swiglu: bool = False, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """The function in PyTorch, each step rounded to x's dtype as the layer's separate kernels round it
    (float32 math inside a step). x [..., K], weight [N or 2N (SwiGLU), K], norm_weight [K], bias [N or 2N],
    residual [..., N] -> [..., N] in out_dtype (default x's)."""
    dtype = x.dtype
    if norm_weight is not None:
        xf = x.float()
        x = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * norm_weight.float()).to(dtype)
    if isinstance(weight, Fp8Weight):
        y = (x.float() @ weight.data.float().T) * weight.scale
    else:
        y = x.float() @ weight.float().T
    if bias is not None:
        y = y + bias.float()
    y = y.to(dtype)
    if swiglu:
        gate, up = y.float().chunk(2, dim=-1)
        y = (F.silu(gate).to(dtype).float() * up).to(dtype)
    if residual is not None:
        y = (residual.float() + y.float()).to(dtype)
    return y.to(out_dtype or dtype)


def torch_linear(x: torch.Tensor, weight: torch.Tensor | Fp8Weight, norm_weight: torch.Tensor | None = None, eps: float = 0.0,
                 bias: torch.Tensor | None = None, residual: torch.Tensor | None = None, swiglu: bool = False,
                 out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """The same function on PyTorch's kernels (cuBLAS and the layer's own ops): the path past MAX_KERNEL_ROWS."""
    if norm_weight is not None:
        x = F.rms_norm(x, (x.shape[-1],), norm_weight, eps)
    if isinstance(weight, Fp8Weight):  # many rows (prefill): widened once per call, then cuBLAS
        weight = weight.dequantize(x.dtype)
    y = F.linear(x, weight, bias)
    if swiglu:
        gate, up = y.chunk(2, dim=-1)
        y = F.silu(gate) * up
    if residual is not None:
        y = residual + y
    return y if out_dtype is None else y.to(out_dtype)


def fused_linear(x: torch.Tensor, weight: torch.Tensor | Fp8Weight, norm_weight: torch.Tensor | None = None, eps: float = 0.0,
                 bias: torch.Tensor | None = None, residual: torch.Tensor | None = None, swiglu: bool = False,
                 out_dtype: torch.dtype | None = None, launch: Launch | None = None) -> torch.Tensor:
    """`fused_linear_reference`'s function in one kernel (two with split-K). x [..., K] (rows may be strided:
    its last dimension contiguous), weight [N or 2N, K] contiguous -> [..., N]. Past MAX_KERNEL_ROWS rows, or
    where the kernel cannot run, PyTorch's kernels (`torch_linear`)."""
    k = x.shape[-1]
    rows = x.reshape(-1, k) if x.dim() != 2 else x
    m = rows.shape[0]
    if (m > MAX_KERNEL_ROWS and launch is None) or not is_available(x.device) or rows.stride(-1) != 1:
        return torch_linear(x, weight, norm_weight, eps, bias, residual, swiglu, out_dtype)
    n = weight.shape[0] // 2 if swiglu else weight.shape[0]
    launch = launch or launch_for(m, n, k)
    if k % (launch.block_k * launch.split_k):
        launch = Launch(launch.block_m, launch.block_n, _divisor_block(k), 1, launch.num_warps, launch.num_stages)
    out = torch.empty((m, n), device=x.device, dtype=out_dtype or x.dtype)
    res = residual.reshape(m, n) if residual is not None else None
    _launch(rows, weight, norm_weight, eps, bias, res, swiglu, out, launch)
    return out.view(*x.shape[:-1], n)


def _divisor_block(k: int) -> int:
    """The largest power-of-two block (16..128) that divides k; 16 where none does (the loads are masked)."""
    return next((block for block in (128, 64, 32, 16) if k % block == 0), 16)


def _launch(x: torch.Tensor, weight: torch.Tensor | Fp8Weight, norm_weight: torch.Tensor | None, eps: float,
            bias: torch.Tensor | None, residual: torch.Tensor | None, swiglu: bool, out: torch.Tensor,
            launch: Launch) -> None:
    m, k = x.shape
    n = out.shape[1]
    grid = (-(-m // launch.block_m), -(-n // launch.block_n), launch.split_k)
    width = 2 * n if swiglu else n
    partial = (torch.empty((launch.split_k, m, width), device=x.device, dtype=torch.float32)
               if launch.split_k > 1 else out)
    flags = dict(HAS_NORM=norm_weight is not None, HAS_BIAS=bias is not None, HAS_RESIDUAL=residual is not None,
                 SWIGLU=swiglu, HAS_SCALE=isinstance(weight, Fp8Weight))
    scale = weight.scale if isinstance(weight, Fp8Weight) else x
    weight = (weight.data if isinstance(weight, Fp8Weight) else weight).contiguous()
    _fused_linear_kernel[grid](
        x, weight, scale, norm_weight if norm_weight is not None else x, bias if bias is not None else x,
        residual if residual is not None else x, out, partial,
        m, n, k, x.stride(0), weight.stride(0), residual.stride(0) if residual is not None else 0, out.stride(0),
        eps, SPLIT_K=launch.split_k, BLOCK_M=launch.block_m, BLOCK_N=launch.block_n, BLOCK_K=launch.block_k,
        IEEE=x.dtype == torch.float32 or is_interpreted(), num_warps=launch.num_warps, num_stages=launch.num_stages, **flags)
    if launch.split_k > 1:
        block_n = min(launch.block_n, 128)
        _split_k_epilogue_kernel[(m, -(-n // block_n))](
            partial, bias if bias is not None else x, residual if residual is not None else x, out,
            m, n, residual.stride(0) if residual is not None else 0, out.stride(0), SPLIT_K=launch.split_k,
            BLOCK_N=block_n, HAS_BIAS=flags["HAS_BIAS"], HAS_RESIDUAL=flags["HAS_RESIDUAL"], SWIGLU=swiglu,
            COMPUTE_DTYPE=_tl_dtype(x.dtype), num_warps=4)


def _tl_dtype(dtype: torch.dtype):
    return {torch.float32: tl.float32, torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}[dtype]


if triton is not None:
    @triton.jit
    def _dot(x, w, acc, IEEE: tl.constexpr):
        """acc + x @ w^T (x [BM, BK], w [BN, BK]; float8 weights widened to x's dtype first, exactly). IEEE: float32
        products in float32 (no tf32): the float32 path, and every dtype under the interpreter, whose half-type dot
        is wrong (exact: a half product fits float32)."""
        if w.dtype != x.dtype:
            w = w.to(x.dtype)
        if IEEE:
            return tl.dot(x.to(tl.float32), tl.trans(w.to(tl.float32)), acc, input_precision="ieee")
        return tl.dot(x, tl.trans(w), acc)

    @triton.jit
    def _finish(acc, acc_up, bias_ptr, res_ptr, out_ptr, rows, cols, mask, n, stride_res, stride_out,
                HAS_BIAS: tl.constexpr, HAS_RESIDUAL: tl.constexpr, SWIGLU: tl.constexpr, DTYPE: tl.constexpr):
        """The epilogue: bias, rounding to the compute dtype, SwiGLU, the residual add; stores [BM, BN]."""
        if HAS_BIAS:
            acc += tl.load(bias_ptr + cols, mask=cols < n, other=0.0).to(tl.float32)[None, :]
        y = acc.to(DTYPE).to(tl.float32)
        if SWIGLU:
            if HAS_BIAS:
                acc_up += tl.load(bias_ptr + n + cols, mask=cols < n, other=0.0).to(tl.float32)[None, :]
            up = acc_up.to(DTYPE).to(tl.float32)
            y = (y * tl.sigmoid(y)).to(DTYPE).to(tl.float32)
            y = (y * up).to(DTYPE).to(tl.float32)
        if HAS_RESIDUAL:
            res = tl.load(res_ptr + rows[:, None] * stride_res + cols[None, :], mask=mask, other=0.0)
            y = (res.to(tl.float32) + y).to(DTYPE).to(tl.float32)
        tl.store(out_ptr + rows[:, None] * stride_out + cols[None, :], y.to(out_ptr.dtype.element_ty), mask=mask)

    @triton.jit
    def _fused_linear_kernel(x_ptr, w_ptr, scale_ptr, norm_ptr, bias_ptr, res_ptr, out_ptr, partial_ptr,
                             M, N, K, stride_x, stride_w, stride_res, stride_out, eps,
                             HAS_NORM: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_RESIDUAL: tl.constexpr,
                             SWIGLU: tl.constexpr, HAS_SCALE: tl.constexpr, SPLIT_K: tl.constexpr, BLOCK_M: tl.constexpr,
                             BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, IEEE: tl.constexpr):
        """Program (m, n, s): rows m*BM.., outputs n*BN.. over the s-th K part; one part finishes in place, several
        leave float32 partials to `_split_k_epilogue_kernel`."""
        dtype = x_ptr.dtype.element_ty
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        ks = tl.arange(0, BLOCK_K)
        row_ok = rows < M
        col_ok = cols < N
        if HAS_NORM:  # each row's mean square over all of K, whatever part this program multiplies
            squares = tl.zeros([BLOCK_M], dtype=tl.float32)
            for k0 in range(0, K, BLOCK_K):
                xk = tl.load(x_ptr + rows[:, None] * stride_x + (k0 + ks)[None, :],
                             mask=row_ok[:, None] & ((k0 + ks) < K)[None, :], other=0.0).to(tl.float32)
                squares += tl.sum(xk * xk, axis=1)
            rstd = tl.rsqrt(squares / K + eps)
        per_part = K // SPLIT_K
        k_first = tl.program_id(2) * per_part
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        acc_up = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for k0 in range(k_first, k_first + per_part, BLOCK_K):
            kk = k0 + ks
            k_ok = kk < K
            xk = tl.load(x_ptr + rows[:, None] * stride_x + kk[None, :], mask=row_ok[:, None] & k_ok[None, :],
                         other=0.0)
            if HAS_NORM:
                scale = tl.load(norm_ptr + kk, mask=k_ok, other=0.0).to(tl.float32)
                xk = (xk.to(tl.float32) * rstd[:, None] * scale[None, :]).to(dtype)
            wk = tl.load(w_ptr + cols[:, None] * stride_w + kk[None, :], mask=col_ok[:, None] & k_ok[None, :],
                         other=0.0)
            acc = _dot(xk, wk, acc, IEEE)
            if SWIGLU:
                wu = tl.load(w_ptr + (cols + N)[:, None] * stride_w + kk[None, :],
                             mask=col_ok[:, None] & k_ok[None, :], other=0.0)
                acc_up = _dot(xk, wu, acc_up, IEEE)
        if HAS_SCALE:  # float8 weights: each output's scale (linear: the K parts may be scaled before their sum)
            acc = acc * tl.load(scale_ptr + cols, mask=col_ok, other=0.0)[None, :]
            if SWIGLU:
                acc_up = acc_up * tl.load(scale_ptr + N + cols, mask=col_ok, other=0.0)[None, :]
        mask = row_ok[:, None] & col_ok[None, :]
        if SPLIT_K == 1:
            _finish(acc, acc_up, bias_ptr, res_ptr, out_ptr, rows, cols, mask, N, stride_res, stride_out,
                    HAS_BIAS, HAS_RESIDUAL, SWIGLU, dtype)
        else:
            width = 2 * N if SWIGLU else N
            part = partial_ptr + tl.program_id(2) * M * width + rows[:, None] * width + cols[None, :]
            tl.store(part, acc, mask=mask)
            if SWIGLU:
                tl.store(part + N, acc_up, mask=mask)

    @triton.jit
    def _split_k_epilogue_kernel(partial_ptr, bias_ptr, res_ptr, out_ptr, M, N, stride_res, stride_out,
                                 SPLIT_K: tl.constexpr, BLOCK_N: tl.constexpr, HAS_BIAS: tl.constexpr,
                                 HAS_RESIDUAL: tl.constexpr, SWIGLU: tl.constexpr, COMPUTE_DTYPE: tl.constexpr):
        """Program (m, n): row m's outputs n*BN..: the K parts summed in order, then `_finish`."""
        row = tl.program_id(0)
        cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        col_ok = cols < N
        width = 2 * N if SWIGLU else N
        acc = tl.zeros([1, BLOCK_N], dtype=tl.float32)
        acc_up = tl.zeros([1, BLOCK_N], dtype=tl.float32)
        for s in tl.static_range(SPLIT_K):
            at = partial_ptr + s * M * width + row * width + cols
            acc += tl.load(at, mask=col_ok, other=0.0)[None, :]
            if SWIGLU:
                acc_up += tl.load(at + N, mask=col_ok, other=0.0)[None, :]
        rows = row + tl.arange(0, 1)
        _finish(acc, acc_up, bias_ptr, res_ptr, out_ptr, rows, cols, col_ok[None, :], N, stride_res, stride_out,
                HAS_BIAS, HAS_RESIDUAL, SWIGLU, COMPUTE_DTYPE)
