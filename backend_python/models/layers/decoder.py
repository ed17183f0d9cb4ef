"""Decoder building blocks shared by the families: Qwen3 layers (per-head q/k RMSNorm); a Llama stack
is the same layers with identities for q_norm/k_norm (`csm/layers.py`, `orpheus/llama.py`), and a
Qwen2 stack is a Llama stack with q/k/v biases (`qkv_bias=True`, `layers/qwen2.py`).

Attention reads and writes a KV cache in batch slots (gpt-fast style): one write path,
`cache.k[layer][step.write_index] = k` (each row a contiguous extent of one pool: `KVCache`), for
prefill (B=1, T=prompt) and decode (B rows, T=1) alike; each query attends to the keys of its own row at positions <= its own position. A row's
queries are always the last T positions written to it (prefill from 0, decode appends), which lets
the CUDA path read only the used prefix of each row (`varlen`, see `attend`).

The CUDA path computes the same function with fewer, larger kernels: fused
q/k/v and gate/up projections (`DecoderStack.fuse_projections`; parameters stay views of the fused
weight), one-kernel RMSNorm, and flash attention over each row's used keys (`KVCache.is_varlen`; decode steps
opt into a split-KV Triton kernel instead, `kernels/decode_attention.py`).
`DecoderStack.compile_layers` then fuses each layer's small kernels (norms, RoPE, residuals, the cache
writes) with Inductor: one compiled layer serves every layer of the stack (regional compilation), so
compiling costs one layer's time, not the stack's. The CPU path is the plain reference code.
"""
from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from ..kernels import decode_attention, rope_write, short_attention
from ..kernels.fused_linear import Fp8Weight, fused_linear, quantize_fp8
from ..rope import apply_rope, rope_cos_sin_of  # noqa: F401 (apply_rope: the layers' import)

log = logging.getLogger("voxlane.models")
VARLEN_DTYPES = (torch.float16, torch.bfloat16)


@dataclass
class KVCache:
    """K/V memory of a stack: k, v: [layers, pool, kv_heads, head_dim], `pool` positions shared by the rows.

    Row r owns the contiguous positions row_starts[r] .. row_starts[r] + row_lengths[r] - 1 of the pool, so
    flash attention reads a row's keys in place from its start (`is_varlen`: CUDA, half types). A *static*
    cache gives row r the positions r * max_seq_len onward (each row a full max_seq_len); a *pooled* one
    (`pool_positions`) places each row where the engine's block allocator put its stream (`place`), sized to
    what that stream needs, so memory, not a row count, bounds the live streams. The last row is the scratch
    row (padding rows of a batch) with max_seq_len positions of its own; a write past a row's length lands
    there, so a padded prefill row never writes into another stream's keys.
    """

    k: torch.Tensor
    v: torch.Tensor
    row_starts: torch.Tensor  # [rows] int64, a row's first pool position
    row_lengths: torch.Tensor  # [rows] int64, positions a row owns
    max_seq_len: int  # the most positions one row attends over
    scratch_start: int  # the scratch row's first pool position (it owns the max_seq_len after it)
    is_varlen: bool = False

    @classmethod
    def allocate(cls, num_layers: int, num_rows: int, num_kv_heads: int, max_seq_len: int, head_dim: int,
                 device: torch.device, dtype: torch.dtype, pool_positions: int | None = None,
                 is_varlen: bool | None = None) -> "KVCache":
        """Static (`pool_positions` None): num_rows rows of max_seq_len. Pooled: pool_positions shared positions
        plus the scratch row's max_seq_len; every row starts on the scratch row until `place`d. `is_varlen`
        None: flash attention where it works here."""
        if pool_positions is None:
            size, starts = num_rows * max_seq_len, torch.arange(num_rows) * max_seq_len
        else:
            size, starts = pool_positions + max_seq_len, torch.full((num_rows,), pool_positions)
        shape = (num_layers, size, num_kv_heads, head_dim)
        # zeros, not empty: masked keys get weight 0, and 0 * NaN garbage would still be NaN
        return cls(torch.zeros(shape, device=device, dtype=dtype), torch.zeros(shape, device=device, dtype=dtype),
                   starts.to(device), torch.full((num_rows,), max_seq_len, device=device), max_seq_len,
                   size - max_seq_len, varlen_attention_works(torch.device(device), dtype) if is_varlen is None
                   else is_varlen)

    @property
    def num_positions(self) -> int:
        """Positions of the pool, the scratch row's included."""
        return self.k.shape[1]

    def place(self, row: int, start: int, length: int) -> None:
        """Row `row` owns pool positions start .. start + length - 1 from now on (outside graph capture)."""
        if start < 0 or length < 1 or start + length > self.scratch_start:
            raise ValueError(f"extent [{start}, {start + length}) is outside the pool of {self.scratch_start}")
        # fills, not `row_starts[row] = start`: an item assignment copies the value from the host and waits for
        # the device (the step in flight: on an H200 a quarter of the LM loop's time at 44 req/s went there)
        self.row_starts[row].fill_(start)
        self.row_lengths[row].fill_(min(length, self.max_seq_len))

    def write_index(self, rows: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """rows [B], positions [B, T] -> [B, T] int64 pool positions to write; past a row's length, scratch."""
        inside = positions < self.row_lengths[rows][:, None]
        scratch = self.scratch_start + positions.clamp(max=self.max_seq_len - 1)
        return torch.where(inside, self.row_starts[rows][:, None] + positions, scratch)

    def upto(self, num_positions: int) -> "KVCache":
        """The same memory attended over its first num_positions per row only (masked attention reads fewer
        keys); varlen flash attention reads only the used keys anyway."""
        return self if self.is_varlen else replace(self, max_seq_len=min(num_positions, self.max_seq_len))


@dataclass
class Step:
    """Where a forward pass reads and writes: rows of the cache and absolute positions."""

    rows: torch.Tensor  # [B] int64, cache row of each batch row
    positions: torch.Tensor  # [B, T] int64, absolute position of each token (the last T of its row)
    cos: torch.Tensor  # [B, T, 1, head_dim]
    sin: torch.Tensor  # [B, T, 1, head_dim], sign-folded for rotate-half (see `apply_rope`)
    write_index: torch.Tensor  # [B, T] int64, the pool position each token's keys and values go to
    max_keys: int  # keys a row attends over at most (the cache's max_seq_len)
    mask: torch.Tensor | None  # [B, 1, T, max_keys] bool, True = attend; None on the varlen path
    key_index: torch.Tensor | None = None  # masked path: [B, max_keys] int64, pool position of each row's keys
    key_starts: torch.Tensor | None = None  # varlen: [B + 1] int32, first pool position of each row
    num_keys: torch.Tensor | None = None  # varlen: [B] int32, keys each row attends to (last position + 1)
    query_starts: torch.Tensor | None = None  # varlen: [B + 1] int32, b * T

    @classmethod
    def build(cls, rows: torch.Tensor, positions: torch.Tensor, head_dim: int, rope_theta: float,
              cache: KVCache, dtype: torch.dtype, rope_positions: torch.Tensor | None = None) -> "Step":
        """`rope_positions` [B, T]: where RoPE puts the tokens, where that is not their place in the row (TontaubeV1's
        front-prompt scheme); None: their places."""
        cos, sin = rope_cos_sin(positions if rope_positions is None else rope_positions, head_dim, rope_theta, dtype)
        write_index, starts = cache.write_index(rows, positions), cache.row_starts[rows]
        if cache.is_varlen:
            key_starts = torch.zeros(rows.shape[0] + 1, dtype=torch.int32, device=rows.device)
            key_starts[:-1] = starts
            return cls(rows, positions, cos, sin, write_index, cache.max_seq_len, None, None, key_starts,
                       _num_keys(positions), _query_starts(positions))
        keys = torch.arange(cache.max_seq_len, device=positions.device)
        mask = keys[None, None, None, :] <= positions[:, None, :, None]
        key_index = (starts[:, None] + keys).clamp(max=cache.num_positions - 1)
        return cls(rows, positions, cos, sin, write_index, cache.max_seq_len, mask, key_index)

    @property
    def row_starts(self) -> torch.Tensor:
        """[B]: each row's first pool position (its key j sits at row_starts + j), on either path."""
        return self.key_starts[:-1] if self.key_starts is not None else self.key_index[:, 0]

    def window(self, start: int, end: int) -> "Step":
        """The tokens start..end-1 of a step built over a whole (short) sequence."""
        positions = self.positions[:, start:end]
        mask = None if self.mask is None else self.mask[:, :, start:end]
        varlen = {} if self.key_starts is None else dict(key_starts=self.key_starts, num_keys=_num_keys(positions),
                                                             query_starts=_query_starts(positions))
        return Step(self.rows, positions, self.cos[:, start:end], self.sin[:, start:end],
                    self.write_index[:, start:end], self.max_keys, mask, self.key_index, **varlen)


def _num_keys(positions: torch.Tensor) -> torch.Tensor:
    return (positions[:, -1] + 1).to(torch.int32)


def _query_starts(positions: torch.Tensor) -> torch.Tensor:
    b, t = positions.shape
    return torch.arange(0, (b + 1) * t, t, dtype=torch.int32, device=positions.device)


def rope_cos_sin(positions: torch.Tensor, head_dim: int, theta: float,
                 dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """positions: [B, T] -> cos, sin: [B, T, 1, head_dim] (fp32 math, like the reference).

    The talker's interleaved MRoPE takes each frequency from one of three position streams
    (temporal/height/width); for text-only prompts the three coincide, so it is ordinary RoPE.
    sin's first half is negated so that rotate-half is a plain `roll` (exact: only signs move).
    """
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=positions.device,
                                             dtype=torch.int64).float() / head_dim))
    return rope_cos_sin_of(positions, inv_freq, dtype)




class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.is_cuda:  # one fused kernel; rounds once where the reference rounds before the weight
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def fuse_linears(*linears: nn.Linear) -> torch.Tensor:
    """One weight [sum(out), in] for several projections of the same input; each module's
    weight becomes a view of it (state_dict names unchanged, no extra memory)."""
    return _fuse_parameters(linears, "weight")


def fuse_biases(*linears: nn.Linear) -> torch.Tensor | None:
    """One bias [sum(out)] for the projections `fuse_linears` fused (each bias becomes a view of it);
    None where they have none."""
    if all(m.bias is None for m in linears):
        return None
    return _fuse_parameters(linears, "bias")


def _fuse_parameters(linears: tuple[nn.Linear, ...], name: str) -> torch.Tensor:
    fused = torch.cat([getattr(m, name).detach() for m in linears])
    start = 0
    for m in linears:
        setattr(m, name, nn.Parameter(fused[start:start + m.out_features], requires_grad=False))
        start += m.out_features
    return fused


class MLP(nn.Module):
    """SwiGLU feed-forward (`gate_proj`, `up_proj`, `down_proj`)."""

    def __init__(self, hidden_size: int, intermediate_size: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)
        self.gate_up: torch.Tensor | None = None  # fused [2 * intermediate, hidden], set by `fuse`

    def fuse(self) -> None:
        if self.gate_up is None:
            self.gate_up = fuse_linears(self.gate_proj, self.up_proj)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gate_up is None:
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        gate, up = F.linear(x, self.gate_up).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class Attention(nn.Module):
    """GQA self-attention with per-head q/k RMSNorm before RoPE; `qkv_bias`: q/k/v projections with biases (Qwen2)."""

    def __init__(self, hidden_size: int, num_heads: int, num_kv_heads: int, head_dim: int, eps: float,
                 qkv_bias: bool = False) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.q_proj = nn.Linear(hidden_size, num_heads * head_dim, bias=qkv_bias)
        self.k_proj = nn.Linear(hidden_size, num_kv_heads * head_dim, bias=qkv_bias)
        self.v_proj = nn.Linear(hidden_size, num_kv_heads * head_dim, bias=qkv_bias)
        self.o_proj = nn.Linear(num_heads * head_dim, hidden_size, bias=False)
        self.q_norm = RMSNorm(head_dim, eps)
        self.k_norm = RMSNorm(head_dim, eps)
        self.qkv: torch.Tensor | None = None  # fused [(heads + 2 * kv_heads) * head_dim, hidden], set by `fuse`
        self.qkv_bias: torch.Tensor | None = None  # fused [(heads + 2 * kv_heads) * head_dim] where biased
        # > 0: norms, RoPE, cache writes and attention in one kernel over at most this many keys per row
        # (`use_short_cache`: a code predictor's per-frame cache; kernels/short_attention.py)
        self.short_cache_keys = 0

    def fuse(self) -> None:
        if self.qkv is None:
            self.qkv = fuse_linears(self.q_proj, self.k_proj, self.v_proj)
            self.qkv_bias = fuse_biases(self.q_proj, self.k_proj, self.v_proj)

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x: [B, T, hidden] -> q [B, T, heads, head_dim], k, v [B, T, kv_heads, head_dim]."""
        b, t, _ = x.shape
        if self.qkv is None:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        else:
            q, k, v = F.linear(x, self.qkv, self.qkv_bias).split(
                (self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim,
                 self.num_kv_heads * self.head_dim), dim=-1)
        return (q.view(b, t, self.num_heads, self.head_dim), k.view(b, t, self.num_kv_heads, self.head_dim),
                v.view(b, t, self.num_kv_heads, self.head_dim))

    def use_short_cache(self, max_positions: int) -> None:
        """Run as one Triton kernel per call (`short_attention`) for a cache of at most max_positions per row
        (0: the plain path). Fuses the q/k/v projections: the kernel reads their one output."""
        self.fuse()
        self.short_cache_keys = short_attention.max_keys_for(max_positions) if max_positions else 0

    def forward(self, x: torch.Tensor, step: Step, k_cache: torch.Tensor, v_cache: torch.Tensor) -> torch.Tensor:
        """x: [B, T, hidden]; k_cache, v_cache: [pool, kv_heads, head_dim] (written in place)."""
        if self.short_cache_keys and not torch.is_grad_enabled():  # the kernel has no backward: inference only
            return self.o_proj(self._short_cache_attention(F.linear(x, self.qkv, self.qkv_bias), step, k_cache,
                                                           v_cache))
        b, t, _ = x.shape
        q, k, v = self.project(x)
        q = apply_rope(self.q_norm(q), step.cos, step.sin)
        k = apply_rope(self.k_norm(k), step.cos, step.sin)
        return self.o_proj(self.write_and_attend(q, k, v, step, k_cache, v_cache).reshape(b, t, -1))

    def attend_projected(self, qkv: torch.Tensor, step: Step, k_cache: torch.Tensor,
                         v_cache: torch.Tensor) -> torch.Tensor:
        """The fused layer's attention from the q/k/v projection's output (qkv [B, T, (heads + 2 kv_heads) *
        head_dim]) -> [B, T, heads * head_dim] before o_proj: the short-cache kernel, or the norms, RoPE and cache
        writes as one kernel (`kernels/rope_write.py`) and then `attend`."""
        if self.short_cache_keys:
            return self._short_cache_attention(qkv, step, k_cache, v_cache)
        b, t, _ = qkv.shape
        q_weight, k_weight, eps = self._qk_norm()
        q = rope_write.rope_write(qkv, q_weight, k_weight, eps, step.cos, step.sin, step.write_index, k_cache,
                                  v_cache, self.num_heads, self.num_kv_heads)
        return attend(q, k_cache, v_cache, step).reshape(b, t, -1)

    def _qk_norm(self) -> tuple[torch.Tensor | None, torch.Tensor | None, float]:
        """The q and k RMSNorm weights and eps; None where the layer has none (a Llama layer)."""
        if isinstance(self.q_norm, RMSNorm):
            return self.q_norm.weight, self.k_norm.weight, self.q_norm.eps
        return None, None, 0.0

    def _short_cache_attention(self, qkv: torch.Tensor, step: Step, k_cache: torch.Tensor,
                               v_cache: torch.Tensor) -> torch.Tensor:
        """`forward` between the q/k/v projection and o_proj as one kernel: -> [B, T, heads * head_dim]."""
        q_weight, k_weight, eps = self._qk_norm()
        return short_attention.short_cache_attention(
            qkv, q_weight, k_weight, eps, step.cos, step.sin, step.positions, step.write_index, step.row_starts,
            k_cache, v_cache, self.num_heads, self.num_kv_heads, self.short_cache_keys)

    @staticmethod
    def write_and_attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, step: Step, k_cache: torch.Tensor,
                         v_cache: torch.Tensor) -> torch.Tensor:
        """Write this step's keys and values to the cache, then attend over the row's keys so far."""
        k_cache[step.write_index] = k
        v_cache[step.write_index] = v
        return attend(q, k_cache, v_cache, step)


def attend(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, step: Step) -> torch.Tensor:
    """q: [B, T, heads, head_dim] -> [B, T, heads, head_dim], over each row's keys <= its positions. On the varlen
    path a decode step (T = 1) runs the split-KV Triton kernel where VOXLANE_DECODE_ATTENTION=triton chose it
    (`kernels/decode_attention.py`; inference only, it has no backward), else flash attention."""
    if step.key_starts is not None:
        if q.shape[1] == 1 and not torch.is_grad_enabled() and decode_attention.is_enabled(q):
            return decode_attention.decode_attention(q, k_cache, v_cache, step.key_starts, step.num_keys,
                                                     step.max_keys)
        return varlen_attention(q, k_cache, v_cache, step)
    keys, values = k_cache[step.key_index].transpose(1, 2), v_cache[step.key_index].transpose(1, 2)  # [B, kv_heads, S, D]
    out = F.scaled_dot_product_attention(q.transpose(1, 2), keys, values, attn_mask=step.mask, enable_gqa=True)
    return out.transpose(1, 2)


def varlen_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, step: Step) -> torch.Tensor:
    """Flash attention reading row r's first num_keys[r] keys in place (no gather, no mask).

    Causal with bottom-right alignment: query i of T attends keys < num_keys - (T - 1 - i), which is
    "keys <= own position" because a row's queries are its last T positions.
    """
    b, t, heads, dim = q.shape
    out = torch.ops.aten._flash_attention_forward(
        q.reshape(b * t, heads, dim), k_cache, v_cache, step.query_starts, step.key_starts, t, step.max_keys,
        0.0, True, False, seqused_k=step.num_keys)[0]
    return out.view(b, t, heads, dim)


@functools.cache
def varlen_attention_works(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether `varlen_attention` runs here and matches masked SDPA (probed once per device/dtype)."""
    if device.type != "cuda" or dtype not in VARLEN_DTYPES:
        return False
    try:
        return _probe_varlen(device, dtype)
    except RuntimeError as exc:  # no flash kernel for this GPU/build: fall back to gather + SDPA
        log.warning("varlen flash attention unavailable, using gather + SDPA: %s", exc)
        return False


def _probe_varlen(device: torch.device, dtype: torch.dtype) -> bool:
    """Prefill-like (T=2, causal) and decode-like (T=1) steps over unordered rows with gaps."""
    gen = torch.Generator(device=device).manual_seed(0)
    cache = KVCache.allocate(1, 4, 2, 32, 128, device, dtype, pool_positions=96, is_varlen=False)  # rows out of order
    for row, start in ((2, 64), (0, 0), (3, 32)):
        cache.place(row, start, 32)
    cache.k.normal_(generator=gen), cache.v.normal_(generator=gen)
    cache.is_varlen, rows = True, torch.tensor([2, 0, 3], device=device)
    k_cache, v_cache = cache.k[0], cache.v[0]
    error = 0.0
    for positions in ([[5, 6], [19, 20], [0, 1]], [[6], [31], [0]]):
        positions = torch.tensor(positions, device=device)
        q = torch.randn(3, positions.shape[1], 4, 128, generator=gen, device=device, dtype=dtype)
        step = Step.build(rows, positions, 128, 10000.0, cache, dtype)
        masked = Step.build(rows, positions, 128, 10000.0, replace(cache, is_varlen=False), dtype)
        reference = attend(q, k_cache, v_cache, masked)
        fast = varlen_attention(q, k_cache, v_cache, step)
        error = max(error, (fast.float() - reference.float()).abs().max().item())
    if error > 2e-2:
        log.warning("varlen flash attention disagrees with SDPA (max error %.3g): not used", error)
    return error <= 2e-2


class DecoderLayer(nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int, num_heads: int, num_kv_heads: int,
                 head_dim: int, eps: float, qkv_bias: bool = False) -> None:
        super().__init__()
        self.self_attn = Attention(hidden_size, num_heads, num_kv_heads, head_dim, eps, qkv_bias)
        self.mlp = MLP(hidden_size, intermediate_size)
        self.input_layernorm = RMSNorm(hidden_size, eps)
        self.post_attention_layernorm = RMSNorm(hidden_size, eps)
        # True: the projections as Triton matmuls with the norms, SwiGLU and residual adds fused in
        # (`kernels/fused_linear.py`; set by `DecoderStack.use_fused_kernels`), inference only
        self.is_fused = False
        self.fp8: dict[str, Fp8Weight] | None = None  # the four projections in float8 (`DecoderStack.use_fp8_weights`)

    def forward(self, x: torch.Tensor, step: Step, k_cache: torch.Tensor, v_cache: torch.Tensor) -> torch.Tensor:
        if self.is_fused and not torch.is_grad_enabled():
            return self._fused_forward(x, step, k_cache, v_cache)
        x = x + self.self_attn(self.input_layernorm(x), step, k_cache, v_cache)
        return x + self.mlp(self.post_attention_layernorm(x))

    def _fused_forward(self, x: torch.Tensor, step: Step, k_cache: torch.Tensor, v_cache: torch.Tensor) -> torch.Tensor:
        """`forward` in four matmul launches (the norms, SwiGLU and residual adds inside them) around the attention."""
        attn, eps, weights = self.self_attn, self.input_layernorm.eps, self.fp8 or self.projection_weights()
        qkv = fused_linear(x, weights["qkv"], self.input_layernorm.weight, eps, attn.qkv_bias)
        x = fused_linear(attn.attend_projected(qkv, step, k_cache, v_cache), weights["o"], residual=x)
        hidden = fused_linear(x, weights["gate_up"], self.post_attention_layernorm.weight,
                              self.post_attention_layernorm.eps, swiglu=True)
        return fused_linear(hidden, weights["down"], residual=x)

    def projection_weights(self) -> dict[str, torch.Tensor]:
        """The fused layer's four weights: q/k/v, o, gate/up, down (`fuse` first)."""
        return {"qkv": self.self_attn.qkv, "o": self.self_attn.o_proj.weight, "gate_up": self.mlp.gate_up,
                "down": self.mlp.down_proj.weight}


class DecoderStack(nn.Module):
    """`layers` + final `norm`; subclasses add their embeddings (names follow the official checkpoint)."""

    def __init__(self, num_layers: int, hidden_size: int, intermediate_size: int, num_heads: int,
                 num_kv_heads: int, head_dim: int, eps: float, qkv_bias: bool = False) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            DecoderLayer(hidden_size, intermediate_size, num_heads, num_kv_heads, head_dim, eps, qkv_bias)
            for _ in range(num_layers))
        self.norm = RMSNorm(hidden_size, eps)

    def fuse_projections(self) -> None:
        """Fuse q/k/v and gate/up weights (CUDA: fewer, larger GEMMs); the math is unchanged."""
        for layer in self.layers:
            layer.self_attn.fuse()
            layer.mlp.fuse()

    def use_short_cache_attention(self, max_positions: int) -> None:
        """Each layer's attention as one Triton kernel over a cache of at most max_positions per row (a code
        predictor's per-frame cache; `kernels/short_attention.py`); 0: the plain attention again."""
        for layer in self.layers:
            layer.self_attn.use_short_cache(max_positions)

    def use_fused_kernels(self, on: bool = True) -> None:
        """Each layer as fused Triton matmuls (`DecoderLayer._fused_forward`; fuses the projections first). Needs
        RMSNorm layer norms and no o_proj bias (Qwen3, Llama, Qwen2 stacks)."""
        for layer in self.layers:
            if on and not (isinstance(layer.input_layernorm, RMSNorm) and layer.self_attn.o_proj.bias is None):
                raise ValueError("fused kernels need RMSNorm layer norms and an o_proj without bias")
            layer.self_attn.fuse()
            layer.mlp.fuse()
            layer.is_fused = on

    def use_fp8_weights(self, on: bool = True) -> None:
        """The fused layers read float8 copies of their four projections (`kernels/fused_linear.Fp8Weight`, a scale
        per output row), quantised now; the bf16 weights stay (prefill past the kernel's rows, the plain path)."""
        for layer in self.layers:
            layer.fp8 = {name: quantize_fp8(w.detach()) for name, w in layer.projection_weights().items()} if on else None

    def forward_layers(self, x: torch.Tensor, step: Step, cache: KVCache) -> torch.Tensor:
        """x: [B, T, hidden] -> the last layer's output [B, T, hidden], before the final norm (which a fused
        head's matmul applies itself)."""
        for i, layer in enumerate(self.layers):
            x = layer(x, step, cache.k[i], cache.v[i])
        return x

    def compile_layers(self) -> None:
        """Compile each layer's forward with Inductor (CUDA). With dynamo's inlined modules the
        layers share one compiled graph per input shape; the parameters are its inputs."""
        for layer in self.layers:
            layer.compile(fullgraph=True)

    def forward(self, x: torch.Tensor, step: Step, cache: KVCache, compiled: bool = True) -> torch.Tensor:
        """x: [B, T, hidden] -> final-normed hidden states [B, T, hidden]. `compiled=False` runs the
        layers' plain forward even where they were compiled (prefill: its many shapes would each compile)."""
        for i, layer in enumerate(self.layers):
            x = (layer if compiled else layer.forward)(x, step, cache.k[i], cache.v[i])
        return self.norm(x)
