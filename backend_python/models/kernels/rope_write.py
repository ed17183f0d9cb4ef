"""A decode step's q/k RMSNorm, RoPE and KV-cache write as one Triton kernel (the talker's attention glue).

Between a layer's fused q/k/v projection and its attention, PyTorch runs the per-head q and k norms, the two
rotations and the two cache writes as separate kernels (Inductor fuses the first four into one and leaves the
writes). This kernel reads the projection's output once: one program per (token, head) of the q heads and the
KV heads, the q heads normalised and rotated into the attention's query, the KV heads' keys normalised, rotated
and written with their values at the token's cache position. Same math as `short_attention`'s (`_norm_rope`,
which both kernels call): the norm rounded once to the model's dtype (as `F.rms_norm`), RoPE in float32, rounded once.
`rope_write_reference` is the function in PyTorch.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..rope import apply_rope
from . import runs_kernels_on

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only installs: the reference's PyTorch ops
    triton = None


def is_available(device: torch.device) -> bool:
    """CUDA with Triton, or the CPU under Triton's interpreter."""
    return triton is not None and runs_kernels_on(device)


def rope_write_reference(qkv: torch.Tensor, q_weight: torch.Tensor | None, k_weight: torch.Tensor | None, eps: float,
                         cos: torch.Tensor, sin: torch.Tensor, write_index: torch.Tensor, k_cache: torch.Tensor,
                         v_cache: torch.Tensor, num_heads: int, num_kv_heads: int) -> torch.Tensor:
    """qkv [B, T, (heads + 2 kv_heads) * D], q/k_weight [D] or None, cos/sin [B, T, 1, D], write_index [B, T]
    int64, k/v_cache [pool, kv_heads, D] (written in place) -> q [B, T, heads, D], normed and rotated."""
    b, t, _ = qkv.shape
    dim = cos.shape[-1]
    q, k, v = qkv.split((num_heads * dim, num_kv_heads * dim, num_kv_heads * dim), dim=-1)
    q, k, v = q.view(b, t, num_heads, dim), k.view(b, t, num_kv_heads, dim), v.view(b, t, num_kv_heads, dim)
    if q_weight is not None:
        q, k = F.rms_norm(q, (dim,), q_weight, eps), F.rms_norm(k, (dim,), k_weight, eps)
    q, k = (apply_rope(x.float(), cos.float(), sin.float()).to(x.dtype) for x in (q, k))
    k_cache[write_index], v_cache[write_index] = k.to(k_cache.dtype), v.to(v_cache.dtype)
    return q


def rope_write(qkv: torch.Tensor, q_weight: torch.Tensor | None, k_weight: torch.Tensor | None, eps: float,
               cos: torch.Tensor, sin: torch.Tensor, write_index: torch.Tensor, k_cache: torch.Tensor,
               v_cache: torch.Tensor, num_heads: int, num_kv_heads: int) -> torch.Tensor:
    """`rope_write_reference` as one launch where the kernel runs here, else the reference itself."""
    if not is_available(qkv.device) or qkv.stride(-1) != 1:
        return rope_write_reference(qkv, q_weight, k_weight, eps, cos, sin, write_index, k_cache, v_cache,
                                    num_heads, num_kv_heads)
    b, t, _ = qkv.shape
    dim = cos.shape[-1]
    q = torch.empty((b, t, num_heads, dim), dtype=qkv.dtype, device=qkv.device)
    has_norm = q_weight is not None
    _rope_write_kernel[(b * t, num_heads + num_kv_heads)](
        qkv, q_weight if has_norm else cos, k_weight if has_norm else cos, cos, sin, write_index, k_cache, v_cache, q,
        qkv.stride(1), cos.stride(0), cos.stride(1), write_index.stride(0), write_index.stride(1),
        k_cache.stride(0), k_cache.stride(1), eps, T=t, HEADS=num_heads, KV_HEADS=num_kv_heads, D=dim,
        HAS_NORM=has_norm, num_warps=1)
    return q


if triton is not None:
    @triton.jit
    def _norm_rope(x_ptr, weight_ptr, d, rolled, cos, sin, eps, D: tl.constexpr, HAS_NORM: tl.constexpr):
        """One head's D values: RMSNorm (rounded to the input's dtype, as F.rms_norm) then RoPE, in float32."""
        x = tl.load(x_ptr + d).to(tl.float32)
        x_rolled = tl.load(x_ptr + rolled).to(tl.float32)
        if HAS_NORM:
            r = tl.rsqrt(tl.sum(x * x, axis=0) / D + eps)
            x = (x * r * tl.load(weight_ptr + d).to(tl.float32)).to(x_ptr.dtype.element_ty).to(tl.float32)
            x_rolled = (x_rolled * r * tl.load(weight_ptr + rolled).to(tl.float32)).to(
                x_ptr.dtype.element_ty).to(tl.float32)
        return x * cos + x_rolled * sin

    @triton.jit
    def _rope_write_kernel(qkv_ptr, q_weight_ptr, k_weight_ptr, cos_ptr, sin_ptr, write_ptr, k_cache_ptr,
                           v_cache_ptr, q_ptr, stride_qkv, stride_cos_b, stride_cos_t, stride_write_b,
                           stride_write_t, stride_cache_pos, stride_cache_head, eps, T: tl.constexpr,
                           HEADS: tl.constexpr, KV_HEADS: tl.constexpr, D: tl.constexpr, HAS_NORM: tl.constexpr):
        """Program (token, head): a query head (head < HEADS) into q, or a KV head's key and value into the cache."""
        token = tl.program_id(0)
        head = tl.program_id(1)
        b = token // T
        t = token % T
        d = tl.arange(0, D)
        rolled = (d + D // 2) % D
        row = qkv_ptr + token * stride_qkv
        cos = tl.load(cos_ptr + b * stride_cos_b + t * stride_cos_t + d).to(tl.float32)
        sin = tl.load(sin_ptr + b * stride_cos_b + t * stride_cos_t + d).to(tl.float32)
        if head < HEADS:
            q = _norm_rope(row + head * D, q_weight_ptr, d, rolled, cos, sin, eps, D, HAS_NORM)
            tl.store(q_ptr + (token * HEADS + head) * D + d, q.to(q_ptr.dtype.element_ty))
        else:
            kv = head - HEADS
            k = _norm_rope(row + (HEADS + kv) * D, k_weight_ptr, d, rolled, cos, sin, eps, D,
                                           HAS_NORM)
            v = tl.load(row + (HEADS + KV_HEADS + kv) * D + d)
            at = tl.load(write_ptr + b * stride_write_b + t * stride_write_t) * stride_cache_pos + kv * stride_cache_head
            tl.store(k_cache_ptr + at + d, k.to(k_cache_ptr.dtype.element_ty))
            tl.store(v_cache_ptr + at + d, v.to(v_cache_ptr.dtype.element_ty))
