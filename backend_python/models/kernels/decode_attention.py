"""Attention of a decode step (one query per row) over the pooled KV cache, split over the keys, in Triton.

The talker's decode attention at 128 rows was 2.19 ms of an H200 frame at ~263 keys, 2.4x its KV read
(BENCHMARKS.md, "Where an LM frame's time goes"): varlen FlashAttention-2 with one query per row fills one
row of its 128-query tile and gives each (row, head) one program, however long the row. This is
flash-decoding instead: one program per (row, KV head, split) attends the KV head's whole group of query
heads (GQA) over a slice of the row's keys, so each key and value tile is read once for the group; each
program writes its slice's output and log-sum-exp in float32, and a second small kernel combines the
slices. The split count (`num_splits_for`) grows as rows x KV heads shrink, so that a small batch still
gives the GPU about two programs per SM; with one split the first kernel writes the output itself.

The math is `decoder.attend`'s for T = 1: softmax(q.k / sqrt(head_dim)) over row b's keys at pool positions
key_starts[b] .. key_starts[b] + num_keys[b] - 1, in float32 (the probabilities rounded to the values' dtype
before they weight the values, as flash attention does). `decode_attention_reference` is the same function in
PyTorch (the tests' reference). The kernels run on CUDA, and on the CPU under Triton's interpreter
(`TRITON_INTERPRET=1`, for tests); a machine without Triton keeps flash attention.

Opt-in until a GPU run measures it: `VOXLANE_DECODE_ATTENTION=triton` (default `flash`, varlen flash attention).
"""
from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from . import launch_pair, runs_kernels_on

try:
    import triton
    import triton.language as tl
    from torch.library import triton_op, wrap_triton
except ImportError:  # CPU-only installs: decode steps keep flash attention
    triton = None

OP_NAME = "voxlane::decode_attention"
BACKENDS = ("flash", "triton")  # VOXLANE_DECODE_ATTENTION's values, the default first
# (keys per tile, warps per program); the tuning knob VOXLANE_DECODE_ATTENTION_LAUNCH="KEYS,WARPS" overrides it
# (`server/microbench/decode_attention.py` times the settings). Not measured yet: a guess from the shapes
# (a 64 x 128 bf16 tile of keys and one of values per step, 16 KiB each).
DEFAULT_LAUNCH = (64, 4)
NUM_SMS = 132  # an H100's and an H200's
PROGRAMS_PER_SM = 2  # the programs a split count aims for, per SM
MAX_SPLITS = 32  # the combining kernel reads a row's splits as one block of this many
MIN_KEYS_PER_SPLIT = 16  # a split's slice of keys is a multiple of this
MIN_DOT_ROWS = 16  # tl.dot's least M: a group of fewer query heads is padded to it


def backend_setting(text: str | None) -> str:
    """VOXLANE_DECODE_ATTENTION -> "flash" (varlen flash attention, the default) or "triton" (this kernel)."""
    if text is None:
        return BACKENDS[0]
    if text not in BACKENDS:
        raise ValueError(f"VOXLANE_DECODE_ATTENTION must be one of {', '.join(BACKENDS)}, got {text!r}")
    return text


def launch_setting(text: str | None) -> tuple[int, int]:
    """`KEYS,WARPS` (VOXLANE_DECODE_ATTENTION_LAUNCH) -> (keys per tile, warps); None: the default."""
    return launch_pair("VOXLANE_DECODE_ATTENTION_LAUNCH", text, DEFAULT_LAUNCH, "KEYS", "64,4",
                       lambda keys: keys >= 16 and not keys & (keys - 1), "keys a power of two >= 16")


BACKEND = backend_setting(os.environ.get("VOXLANE_DECODE_ATTENTION"))
LAUNCH = launch_setting(os.environ.get("VOXLANE_DECODE_ATTENTION_LAUNCH"))


def is_available(device: torch.device) -> bool:
    """Whether the kernel runs for tensors on `device`: CUDA with Triton, or the CPU under Triton's interpreter."""
    available = triton is not None and runs_kernels_on(device)
    if available:
        _register_op()  # before any torch.compile traces a call
    return available


def is_enabled(q: torch.Tensor) -> bool:
    """Whether `decoder.attend` runs this kernel for a decode step's q [B, 1, heads, head_dim]: chosen by
    VOXLANE_DECODE_ATTENTION, available on q's device, and a head_dim the kernel tiles (a power of two)."""
    dim = q.shape[-1]
    return BACKEND == "triton" and dim >= 16 and dim & (dim - 1) == 0 and is_available(q.device)


def num_splits_for(num_rows: int, num_kv_heads: int, max_keys: int, num_sms: int = NUM_SMS) -> int:
    """Splits of each row's keys: the fewest that give at least PROGRAMS_PER_SM programs per SM over
    num_rows x num_kv_heads (row, KV head) pairs, at most MAX_SPLITS and no more than max_keys (the most keys a
    row can have) fills with MIN_KEYS_PER_SPLIT each. Few rows: many splits; many rows: one."""
    wanted = _cdiv(num_sms * PROGRAMS_PER_SM, num_rows * num_kv_heads)
    return max(1, min(wanted, MAX_SPLITS, _cdiv(max_keys, MIN_KEYS_PER_SPLIT)))


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def decode_attention_reference(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                               key_starts: torch.Tensor, num_keys: torch.Tensor) -> torch.Tensor:
    """q [B, 1, heads, D], k/v_cache [pool, kv_heads, D], key_starts [>= B] (row b's first pool position; the
    varlen Step's [B + 1] will do), num_keys [B] (>= 1) -> [B, 1, heads, D] in q's dtype: masked SDPA in float32,
    as `decoder.attend`'s masked path computes it."""
    b = q.shape[0]
    keys = torch.arange(int(num_keys.max()), device=q.device)
    index = (key_starts[:b, None].long() + keys).clamp(max=k_cache.shape[0] - 1)  # [B, K]
    mask = (keys[None, :] < num_keys[:, None])[:, None, None, :]  # [B, 1, 1, K]
    out = F.scaled_dot_product_attention(q.transpose(1, 2).float(), k_cache[index].transpose(1, 2).float(),
                                         v_cache[index].transpose(1, 2).float(), attn_mask=mask, enable_gqa=True)
    return out.transpose(1, 2).to(q.dtype)


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, key_starts: torch.Tensor,
                     num_keys: torch.Tensor, max_keys: int, num_splits: int = 0, block_keys: int = 0,
                     num_warps: int = 0) -> torch.Tensor:
    """`decode_attention_reference` as one or two kernel launches; max_keys: the most keys a row may have (the
    cache's max_seq_len); num_splits 0: `num_splits_for` the batch; block_keys, num_warps 0: `LAUNCH`.
    Traceable by torch.compile and capturable in a CUDA graph (a `triton_op`, no host sync)."""
    num_splits = num_splits or num_splits_for(q.shape[0], k_cache.shape[1], max_keys)
    if not 1 <= num_splits <= MAX_SPLITS:
        raise ValueError(f"num_splits must be in [1, {MAX_SPLITS}], got {num_splits}")
    _register_op()
    return torch.ops.voxlane.decode_attention(q, k_cache, v_cache, key_starts, num_keys, num_splits,
                                              block_keys or LAUNCH[0], num_warps or LAUNCH[1])


if triton is not None:
    @triton.jit
    def _decode_attention_split_kernel(
            q_ptr, k_cache_ptr, v_cache_ptr, starts_ptr, num_keys_ptr, out_ptr, lse_ptr,
            stride_q_b, stride_q_h, stride_q_d, stride_starts, stride_num_keys,
            stride_cache_pos, stride_cache_head, stride_cache_d,
            stride_out_b, stride_out_s, stride_out_h, stride_lse_b, stride_lse_s,
            GROUP: tl.constexpr, GROUP_BLOCK: tl.constexpr, D: tl.constexpr, BLOCK: tl.constexpr,
            MIN_KEYS: tl.constexpr, WRITES_LSE: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr,
            SCALE: tl.constexpr):
        """Program (b, kv, s): the GROUP query heads of KV head kv in row b over split s of the row's keys; writes
        their output (normalised over the split's keys) and, with WRITES_LSE, its log-sum-exp (-inf: no keys)."""
        b = tl.program_id(0)
        kv = tl.program_id(1)
        split = tl.program_id(2)
        num_keys = tl.load(num_keys_ptr + b * stride_num_keys)
        start = tl.load(starts_ptr + b * stride_starts).to(tl.int64)
        per_split = tl.cdiv(tl.cdiv(num_keys, tl.num_programs(2)), MIN_KEYS) * MIN_KEYS
        first = split * per_split
        last = tl.minimum(first + per_split, num_keys)
        g = tl.arange(0, GROUP_BLOCK)
        d = tl.arange(0, D)
        heads = kv * GROUP + g
        is_head = g < GROUP
        q = tl.load(q_ptr + b * stride_q_b + heads[:, None] * stride_q_h + d[None, :] * stride_q_d,
                    mask=is_head[:, None], other=0.0)  # [GROUP_BLOCK, D], padding heads 0
        if UPCAST:
            q = q.to(tl.float32)
        m = tl.full([GROUP_BLOCK], float("-inf"), tl.float32)
        l = tl.zeros([GROUP_BLOCK], tl.float32)
        acc = tl.zeros([GROUP_BLOCK, D], tl.float32)
        for first_key in range(first, last, BLOCK):
            keys = first_key + tl.arange(0, BLOCK)
            is_key = keys < last
            at = (start + keys) * stride_cache_pos + kv * stride_cache_head
            k = tl.load(k_cache_ptr + at[None, :] + d[:, None] * stride_cache_d, mask=is_key[None, :], other=0.0)
            v = tl.load(v_cache_ptr + at[:, None] + d[None, :] * stride_cache_d, mask=is_key[:, None], other=0.0)
            # k: [D, BLOCK] (laid out for the dot), v: [BLOCK, D]
            if UPCAST:
                k = k.to(tl.float32)
            # [GROUP_BLOCK, BLOCK]; the scale a constant: passed as a runtime float, Inductor made it a float64 and
            # the compiled op's scores rounded unlike the eager one's
            scores = tl.dot(q, k, input_precision=PRECISION) * SCALE
            scores = tl.where(is_key[None, :], scores, float("-inf"))
            m_new = tl.maximum(m, tl.max(scores, axis=1))  # finite: the tile's first key is a key
            alpha = tl.exp(m - m_new)
            p = tl.exp(scores - m_new[:, None])
            l = l * alpha + tl.sum(p, axis=1)
            p = p.to(v_cache_ptr.dtype.element_ty)
            if UPCAST:
                p, v = p.to(tl.float32), v.to(tl.float32)
            acc = acc * alpha[:, None] + tl.dot(p, v, input_precision=PRECISION)
            m = m_new
        has_keys = l > 0
        o = acc / tl.where(has_keys, l, 1.0)[:, None]
        at = out_ptr + b * stride_out_b + split * stride_out_s + heads[:, None] * stride_out_h + d[None, :]
        tl.store(at, o.to(out_ptr.dtype.element_ty), mask=is_head[:, None])
        if WRITES_LSE:
            lse = tl.where(has_keys, m + tl.log(tl.where(has_keys, l, 1.0)), float("-inf"))
            tl.store(lse_ptr + b * stride_lse_b + split * stride_lse_s + heads, lse, mask=is_head)

    @triton.jit
    def _decode_attention_combine_kernel(
            parts_ptr, lse_ptr, out_ptr, num_splits, stride_parts_b, stride_parts_s, stride_parts_h, stride_lse_b,
            stride_lse_s, stride_out_b, stride_out_h, D: tl.constexpr, SPLITS_BLOCK: tl.constexpr):
        """Program (b, h): query head h of row b, its splits' outputs weighted by exp(lse - the largest lse)."""
        b = tl.program_id(0)
        h = tl.program_id(1)
        s = tl.arange(0, SPLITS_BLOCK)
        d = tl.arange(0, D)
        is_split = s < num_splits
        lse = tl.load(lse_ptr + b * stride_lse_b + s * stride_lse_s + h, mask=is_split, other=float("-inf"))
        weights = tl.exp(lse - tl.max(lse, axis=0))  # split 0 always has keys: the largest is finite
        parts = tl.load(parts_ptr + b * stride_parts_b + s[:, None] * stride_parts_s + h * stride_parts_h + d[None, :],
                        mask=is_split[:, None], other=0.0)  # [SPLITS_BLOCK, D]
        o = tl.sum(weights[:, None] * parts, axis=0) / tl.sum(weights, axis=0)
        tl.store(out_ptr + b * stride_out_b + h * stride_out_h + d, o.to(out_ptr.dtype.element_ty))


def _split_meta(q: torch.Tensor, num_kv_heads: int, block_keys: int, num_warps: int) -> dict:
    """The split kernel's constexprs. On the CPU the dots' operands go to float32 first: Triton's interpreter
    multiplies bf16 operands' raw bits (it stores bf16 as uint16); bf16 products are exact in float32 either way.
    float32 inputs: IEEE dots, not TF32."""
    group = q.shape[2] // num_kv_heads
    return dict(GROUP=group, GROUP_BLOCK=max(MIN_DOT_ROWS, 1 << (group - 1).bit_length()), D=q.shape[3],
                BLOCK=block_keys, MIN_KEYS=MIN_KEYS_PER_SPLIT, UPCAST=q.device.type != "cuda",
                PRECISION="ieee" if q.dtype == torch.float32 else "tf32", SCALE=q.shape[3] ** -0.5, num_warps=num_warps)


_registered = False


def _register_op() -> None:
    """Register the kernels as `torch.ops.voxlane.decode_attention`, once, when first needed (or at import where
    VOXLANE_DECODE_ATTENTION chose them, so that no compiled layer's trace registers it): `triton_op` finds the
    Triton kernels a function launches through Inductor, an import of about a second that a process which never
    runs the kernel does not pay."""
    global _registered
    if _registered:
        return
    _registered = True

    @triton_op(OP_NAME, mutates_args={})
    def _decode_attention_op(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                             key_starts: torch.Tensor, num_keys: torch.Tensor, num_splits: int, block_keys: int,
                             num_warps: int) -> torch.Tensor:
        b, _, heads, dim = q.shape
        num_kv_heads = k_cache.shape[1]
        out = torch.empty((b, 1, heads, dim), dtype=q.dtype, device=q.device)
        meta = _split_meta(q, num_kv_heads, block_keys, num_warps)
        common = (q, k_cache, v_cache, key_starts, num_keys)
        strides = (q.stride(0), q.stride(2), q.stride(3), key_starts.stride(0), num_keys.stride(0),
                   k_cache.stride(0), k_cache.stride(1), k_cache.stride(2))
        if num_splits == 1:  # the split's output is the output
            wrap_triton(_decode_attention_split_kernel)[(b, num_kv_heads, 1)](
                *common, out, out, *strides, out.stride(0), 0, out.stride(2), 0, 0,
                WRITES_LSE=False, **meta)
            return out
        parts = torch.empty((b, num_splits, heads, dim), dtype=torch.float32, device=q.device)
        lse = torch.empty((b, num_splits, heads), dtype=torch.float32, device=q.device)
        wrap_triton(_decode_attention_split_kernel)[(b, num_kv_heads, num_splits)](
            *common, parts, lse, *strides, parts.stride(0), parts.stride(1), parts.stride(2), lse.stride(0),
            lse.stride(1), WRITES_LSE=True, **meta)
        wrap_triton(_decode_attention_combine_kernel)[(b, heads)](
            parts, lse, out, num_splits, parts.stride(0), parts.stride(1), parts.stride(2), lse.stride(0),
            lse.stride(1), out.stride(0), out.stride(2), D=dim, SPLITS_BLOCK=MAX_SPLITS, num_warps=4)
        return out


if triton is not None and BACKEND == "triton":
    _register_op()
