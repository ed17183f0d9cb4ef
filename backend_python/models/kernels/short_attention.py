"""Attention over a short per-frame cache (the code predictor's 16 positions) as one Triton kernel per layer.

A code-predictor step attends over at most `num_code_groups` keys per row, rewritten every frame. Compiled
PyTorch runs each layer's attention of a step as the q/k RMSNorm and RoPE (one Inductor kernel), the two
cache writes, and a general flash-attention kernel over those few keys: at 128 rows the flash kernel alone
was 1.84 ms of a 14.8 ms frame on an H200 (BENCHMARKS.md, "Where an LM frame's time goes"). This kernel does
all of it in one launch, one program per (batch row, query head) by default (`LAUNCH`): it normalises and
rotates the step's keys, the group's first program writes them and the values to the cache, and each program
attends its query head over the row's keys, with the keys and values of the whole row in registers
(16 × head_dim per tensor).

The math is `decoder.Attention`'s: per-head RMSNorm (rounded once to the model's dtype, as `F.rms_norm`
does on CUDA), rotate-half RoPE with the sign-folded sin, softmax(q·k / sqrt(head_dim)) over keys at
positions <= the query's own, in float32. `short_cache_attention_reference` is the same function in
PyTorch (the tests' reference). The kernel runs on CUDA, and on the CPU under Triton's interpreter
(`TRITON_INTERPRET=1`, for tests); a machine without Triton keeps the PyTorch path.
"""
from __future__ import annotations

import os

import torch
import torch.nn.functional as F

from .rope_write import _norm_rope, rope_write_reference
from . import launch_pair, runs_kernels_on

try:
    import triton
    import triton.language as tl
    from torch.library import triton_op, wrap_triton
except ImportError:  # CPU-only installs: the predictor keeps the PyTorch attention
    triton = None

OP_NAME = "voxlane::short_cache_attention"
# (query heads per program, warps per program): 0 heads = a KV head's whole group. One head on one warp was the
# fastest on an H200 at 1, 32 and 128 rows (BENCHMARKS.md, "Item 2, first part"). The tuning knob
# VOXLANE_SHORT_ATTENTION_LAUNCH="HEADS,WARPS" overrides it (`server/microbench/short_attention.py` times them).
DEFAULT_LAUNCH = (1, 1)


def launch_setting(text: str | None) -> tuple[int, int]:
    """`HEADS,WARPS` (VOXLANE_SHORT_ATTENTION_LAUNCH) -> (heads per program, warps); None: the default."""
    return launch_pair("VOXLANE_SHORT_ATTENTION_LAUNCH", text, DEFAULT_LAUNCH, "HEADS", "1,1",
                       lambda heads: heads >= 0, "heads >= 0")


LAUNCH = launch_setting(os.environ.get("VOXLANE_SHORT_ATTENTION_LAUNCH"))


def is_available(device: torch.device) -> bool:
    """Whether the kernel runs for tensors on `device`: CUDA with Triton, or the CPU under Triton's interpreter."""
    available = triton is not None and runs_kernels_on(device)
    if available:
        _register_op()  # before any torch.compile traces a call
    return available


def max_keys_for(num_positions: int) -> int:
    """The kernel's key block for a cache of num_positions per row (a power of two, at least 16)."""
    return max(16, 1 << (num_positions - 1).bit_length())


def short_cache_attention_reference(qkv: torch.Tensor, q_weight: torch.Tensor | None, k_weight: torch.Tensor | None,
                                    eps: float, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor,
                                    write_index: torch.Tensor, key_starts: torch.Tensor, k_cache: torch.Tensor,
                                    v_cache: torch.Tensor, num_heads: int, num_kv_heads: int) -> torch.Tensor:
    """qkv [B, T, (heads + 2 kv_heads) * D] (the fused projection's output), q/k_weight [D] or None (no q/k
    norm), cos/sin [B, T, 1, D], positions / write_index [B, T] int64, key_starts [B] int64 (a row's first
    cache position; its key j sits at key_starts + j), k/v_cache [pool, kv_heads, D] (written in place)
    -> [B, T, heads * D]."""
    b, t, _ = qkv.shape
    q = rope_write_reference(qkv, q_weight, k_weight, eps, cos, sin, write_index, k_cache, v_cache, num_heads,
                             num_kv_heads)
    max_keys = max_keys_for(int(positions.max()) + 1)
    keys = torch.arange(max_keys, device=qkv.device)
    index = (key_starts[:, None] + keys).clamp(max=k_cache.shape[0] - 1)  # [B, K]
    mask = keys[None, None, None, :] <= positions[:, None, :, None]  # [B, 1, T, K]
    out = F.scaled_dot_product_attention(q.transpose(1, 2).float(), k_cache[index].transpose(1, 2).float(),
                                         v_cache[index].transpose(1, 2).float(), attn_mask=mask, enable_gqa=True)
    return out.transpose(1, 2).reshape(b, t, -1).to(qkv.dtype)


def short_cache_attention(qkv: torch.Tensor, q_weight: torch.Tensor | None, k_weight: torch.Tensor | None,
                          eps: float, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor,
                          write_index: torch.Tensor, key_starts: torch.Tensor, k_cache: torch.Tensor,
                          v_cache: torch.Tensor, num_heads: int, num_kv_heads: int, max_keys: int,
                          heads_per_program: int = 0, num_warps: int = 0) -> torch.Tensor:
    """`short_cache_attention_reference` as one kernel launch; max_keys: `max_keys_for` the row's positions (no
    query's position may reach it); heads_per_program (a divisor of the group), num_warps: 0 = `LAUNCH`.
    Traceable by torch.compile (a `triton_op`)."""
    _register_op()
    return torch.ops.voxlane.short_cache_attention(qkv, q_weight, k_weight, eps, cos, sin, positions, write_index,
                                                   key_starts, k_cache, v_cache, num_heads, num_kv_heads, max_keys,
                                                   heads_per_program, num_warps)


if triton is not None:
    @triton.jit
    def _short_cache_attention_kernel(
            qkv_ptr, q_weight_ptr, k_weight_ptr, cos_ptr, sin_ptr, positions_ptr, write_ptr, starts_ptr,
            k_cache_ptr, v_cache_ptr, out_ptr,
            stride_qkv, stride_cos_b, stride_cos_t, stride_pos_b, stride_pos_t, stride_write_b, stride_write_t,
            stride_starts, stride_cache_pos, stride_cache_head, stride_out, eps, scale,
            T: tl.constexpr, HEADS: tl.constexpr, KV_HEADS: tl.constexpr, D: tl.constexpr,
            MAX_KEYS: tl.constexpr, HAS_NORM: tl.constexpr, HEADS_PER_PROGRAM: tl.constexpr):
        """Program (b, p): query heads p * HEADS_PER_PROGRAM onward of row b (one KV head's group, or a part of
        it); the program holding its group's first head writes the KV head's new keys and values."""
        b = tl.program_id(0)
        first_head = tl.program_id(1) * HEADS_PER_PROGRAM
        group: tl.constexpr = HEADS // KV_HEADS
        kv = first_head // group
        writes = (first_head % group) == 0
        d = tl.arange(0, D)
        rolled = (d + D // 2) % D
        keys = tl.arange(0, MAX_KEYS)
        start = tl.load(starts_ptr + b * stride_starts)
        # the row's keys and values before this step's first token, from the cache
        first = tl.load(positions_ptr + b * stride_pos_b)
        cached = (keys < first)[:, None]
        at = (start + keys)[:, None] * stride_cache_pos + kv * stride_cache_head + d[None, :]
        k_all = tl.load(k_cache_ptr + at, mask=cached, other=0.0).to(tl.float32)
        v_all = tl.load(v_cache_ptr + at, mask=cached, other=0.0).to(tl.float32)
        # this step's keys and values: written to the cache, and put in place in the registers' copy
        for t in tl.static_range(T):
            row = qkv_ptr + (b * T + t) * stride_qkv
            pos = tl.load(positions_ptr + b * stride_pos_b + t * stride_pos_t)
            cos = tl.load(cos_ptr + b * stride_cos_b + t * stride_cos_t + d).to(tl.float32)
            sin = tl.load(sin_ptr + b * stride_cos_b + t * stride_cos_t + d).to(tl.float32)
            k = _norm_rope(row + (HEADS + kv) * D, k_weight_ptr, d, rolled, cos, sin, eps, D, HAS_NORM)
            k = k.to(k_cache_ptr.dtype.element_ty)
            v = tl.load(row + (HEADS + KV_HEADS + kv) * D + d).to(v_cache_ptr.dtype.element_ty)
            write = tl.load(write_ptr + b * stride_write_b + t * stride_write_t)
            tl.store(k_cache_ptr + write * stride_cache_pos + kv * stride_cache_head + d, k, mask=(d < D) & writes)
            tl.store(v_cache_ptr + write * stride_cache_pos + kv * stride_cache_head + d, v, mask=(d < D) & writes)
            here = (keys == pos)[:, None]
            k_all = tl.where(here, k.to(tl.float32)[None, :], k_all)
            v_all = tl.where(here, v.to(tl.float32)[None, :], v_all)
        # each query head of this KV head, over the keys at positions <= its own
        for t in tl.static_range(T):
            row = qkv_ptr + (b * T + t) * stride_qkv
            pos = tl.load(positions_ptr + b * stride_pos_b + t * stride_pos_t)
            cos = tl.load(cos_ptr + b * stride_cos_b + t * stride_cos_t + d).to(tl.float32)
            sin = tl.load(sin_ptr + b * stride_cos_b + t * stride_cos_t + d).to(tl.float32)
            visible = keys <= pos
            for g in tl.static_range(HEADS_PER_PROGRAM):
                head = first_head + g
                q = _norm_rope(row + head * D, q_weight_ptr, d, rolled, cos, sin, eps, D, HAS_NORM)
                q = q.to(qkv_ptr.dtype.element_ty).to(tl.float32)
                scores = tl.where(visible, tl.sum(q[None, :] * k_all, axis=1) * scale, float("-inf"))
                weights = tl.exp(scores - tl.max(scores, axis=0))
                o = tl.sum(weights[:, None] * v_all, axis=0) / tl.sum(weights, axis=0)
                tl.store(out_ptr + (b * T + t) * stride_out + head * D + d, o.to(out_ptr.dtype.element_ty))


_registered = False


def _register_op() -> None:
    """Register the kernel as `torch.ops.voxlane.short_cache_attention`, once, when it is first needed: torch's
    `triton_op` finds the Triton kernels a function launches through Inductor, an import of about a second that a
    process which never runs the kernel (a CPU server's every stub) does not pay."""
    global _registered
    if _registered:
        return
    _registered = True

    @triton_op(OP_NAME, mutates_args={"k_cache", "v_cache"})
    def _short_cache_attention_op(qkv: torch.Tensor, q_weight: torch.Tensor | None, k_weight: torch.Tensor | None,
                                  eps: float, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor,
                                  write_index: torch.Tensor, key_starts: torch.Tensor, k_cache: torch.Tensor,
                                  v_cache: torch.Tensor, num_heads: int, num_kv_heads: int, max_keys: int,
                                  heads_per_program: int = 0, num_warps: int = 0) -> torch.Tensor:
        b, t, _ = qkv.shape
        dim = cos.shape[-1]
        out = torch.empty((b, t, num_heads * dim), dtype=qkv.dtype, device=qkv.device)
        has_norm = q_weight is not None
        per_program = heads_per_program or LAUNCH[0] or num_heads // num_kv_heads
        wrap_triton(_short_cache_attention_kernel)[(b, num_heads // per_program)](
            qkv, q_weight if has_norm else cos, k_weight if has_norm else cos, cos, sin, positions, write_index,
            key_starts, k_cache, v_cache, out,
            qkv.stride(1), cos.stride(0), cos.stride(1), positions.stride(0), positions.stride(1),
            write_index.stride(0), write_index.stride(1), key_starts.stride(0), k_cache.stride(0), k_cache.stride(1), out.stride(1),
            eps, dim ** -0.5, T=t, HEADS=num_heads, KV_HEADS=num_kv_heads, D=dim, MAX_KEYS=max_keys,
            HAS_NORM=has_norm, HEADS_PER_PROGRAM=per_program, num_warps=num_warps or LAUNCH[1])
        return out
