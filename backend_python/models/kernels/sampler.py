"""Sampling one codebook for every row as one Triton kernel: no sort, the noise drawn inside.

`layers/sampling.sample` (the reference, and the CPU path) warps each row's logits (repetition penalty, masks,
temperature, top-k, top-p) and draws by the exponential race: argmax(softmax / noise), noise Exp(1). On an H200
its top-k and top-p sort every row (15 radix sorts a Qwen3-TTS frame), each row's noise is a kernel of its own
before the frame (one `exponential_` per sampled row, launched from the host), and the chain is a dozen kernels a
codebook. This kernel is one program per row with the row's logits in registers:

- **top-k without a sort**: the k-th largest value is found by building its order-preserving integer key bit by
  bit (32 counts over the row), and tokens below it are masked as the reference masks them (ties kept);
- **top-p without a sort**: the reference removes a token when the probability mass of the tokens sorted up to it
  (ascending) is at most 1 - p; that mass grows with the token's value, so the removed tokens are those whose key
  is at most a threshold, found the same way (32 masked sums). Within the reference's tie rules (equal values, and
  sums in another order, can fall on the other side of a boundary they touch) the kept set is the reference's;
- **the noise from a counter-based generator** (Philox, Triton's `randint`): Exp(1) = -log(1 - u) of a uniform
  keyed by the row's seed, its frame counter and the draw's index in the frame, so a stream's noise depends on
  its seed and frame alone (not on its batch neighbours), and needs no host launch: the draws happen inside the
  frame's CUDA graph. Explicit noise (`noise`) gives the reference's draw on the same noise (tests).

Codebook 0 of a Qwen3-TTS frame also reads its row's repetition record (`seen`, penalty as HF's), masks special
ids (`suppressed`) and EOS where blocked, and marks the sampled token as seen. Runs on CUDA, and on the CPU under
Triton's interpreter (`TRITON_INTERPRET=1`, tests); `philox_exponential` is the same noise on its own.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..layers.sampling import TINY, BatchSampling
from . import runs_kernels_on

try:
    import triton
    import triton.language as tl
except ImportError:
    triton = None


@dataclass
class NoiseKeys:
    """Where a fused sampler's noise comes from: each row's (seed, frame counter) and the first draw number of
    this use (a frame numbers its draws: codebook 0's vocabulary first, then each predictor step's)."""

    keys: torch.Tensor  # [B, 2] int64
    offset: int = 0

    def at(self, offset: int) -> "NoiseKeys":
        return NoiseKeys(self.keys, offset)


def is_available(device: torch.device) -> bool:
    """CUDA with Triton, or the CPU under Triton's interpreter."""
    return triton is not None and runs_kernels_on(device)


def fused_sample(logits: torch.Tensor, sampling: BatchSampling, *, noise: torch.Tensor | None = None,
                 noise_keys: torch.Tensor | None = None, noise_offset: int = 0, rows: torch.Tensor | None = None,
                 seen: torch.Tensor | None = None, suppressed: torch.Tensor | None = None, eos_id: int = -1,
                 is_eos_blocked: torch.Tensor | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """logits [B, V] float32 (with `rows`: [R, V], row b reads logits[rows[b]]) -> tokens [B] int64 (into `out`).

    Noise: `noise` [B, V] Exp(1) as the reference takes it, or `noise_keys` [B, 2] int64 (seed, frame counter)
    with the draws numbered noise_offset .. noise_offset + V - 1 in the frame. `seen` [R, V] bool with `rows`:
    the repetition penalty (`sampling.repetition_penalty`) on seen tokens, and the sampled token marked seen.
    `suppressed` [V] bool: never sampled, but EOS (`eos_id`) where `is_eos_blocked` [B] bool is False."""
    if (noise is None) == (noise_keys is None):
        raise ValueError("give exactly one of noise and noise_keys")
    num_rows = sampling.temperature.shape[0]
    vocab = logits.shape[1]
    out = torch.empty(num_rows, dtype=torch.int64, device=logits.device) if out is None else out
    s = sampling
    has_penalty, has_suppress = seen is not None, suppressed is not None
    dummy = logits
    _sample_kernel[(num_rows,)](
        logits, logits.stride(0), rows if rows is not None else dummy, rows.stride(0) if rows is not None else 0,
        seen.view(torch.uint8) if has_penalty else dummy, seen.stride(0) if has_penalty else 0,
        suppressed.view(torch.uint8) if has_suppress else dummy,
        is_eos_blocked.view(torch.uint8) if is_eos_blocked is not None else dummy,
        is_eos_blocked.stride(0) if is_eos_blocked is not None else 0, eos_id,
        s.temperature, s.temperature.stride(0), s.top_k, s.top_k.stride(0), s.top_p, s.top_p.stride(0),
        s.repetition_penalty, s.repetition_penalty.stride(0), s.is_greedy.view(torch.uint8), s.is_greedy.stride(0),
        noise if noise is not None else dummy, noise.stride(0) if noise is not None else 0,
        noise_keys if noise_keys is not None else dummy, noise_keys.stride(0) if noise_keys is not None else 0,
        noise_offset, out, out.stride(0), vocab, TINY,
        HAS_ROWS=rows is not None, HAS_PENALTY=has_penalty, HAS_SUPPRESS=has_suppress,
        NOISE_IN_MEMORY=noise is not None, BLOCK_V=triton.next_power_of_2(vocab),
        num_warps=4 if vocab <= 4096 else 8)
    return out


def philox_exponential(noise_keys: torch.Tensor, noise_offset: int, width: int) -> torch.Tensor:
    """The Exp(1) draws `fused_sample` makes from noise_keys [B, 2] (seed, counter) for the draws numbered
    noise_offset .. noise_offset + width - 1 -> [B, width] float32 (tests, and anything that needs the noise)."""
    out = torch.empty(noise_keys.shape[0], width, dtype=torch.float32, device=noise_keys.device)
    _exponential_kernel[(noise_keys.shape[0],)](noise_keys, noise_keys.stride(0), noise_offset, out, out.stride(0),
                                                width, TINY, BLOCK_V=triton.next_power_of_2(width))
    return out


def noise_keys(generators: list[torch.Generator], counters: list[int]) -> torch.Tensor:
    """The rows' noise keys [B, 2] int64 on the host: each row's generator's seed and its frame counter."""
    return torch.tensor([[seed_key(g.initial_seed()), counter] for g, counter in zip(generators, counters)],
                        dtype=torch.int64)


def seed_key(seed: int) -> int:
    """A generator's 64-bit seed (0 .. 2**64 - 1) as the int64 a noise key column holds (two's complement)."""
    seed %= 1 << 64
    return seed - (1 << 64) if seed >= 1 << 63 else seed


if triton is not None:
    @triton.jit
    def _exponential(keys_ptr, stride_keys, b, index, tiny):
        """Exp(1) draws for row b at the frame's draw numbers `index` (int64 block): Philox keyed by the row's seed,
        counter (high word of the offset) and index (low word)."""
        seed = tl.load(keys_ptr + b * stride_keys)
        counter = tl.load(keys_ptr + b * stride_keys + 1)
        offset = (counter << 32) + index
        u = tl.random.uint_to_uniform_float(tl.randint(seed, offset))  # [0, 1)
        return tl.maximum(-tl.log(1.0 - u), tiny)

    @triton.jit
    def _exponential_kernel(keys_ptr, stride_keys, noise_offset, out_ptr, stride_out, V, tiny, BLOCK_V: tl.constexpr):
        b = tl.program_id(0)
        v = tl.arange(0, BLOCK_V)
        noise = _exponential(keys_ptr, stride_keys, b, noise_offset + v.to(tl.int64), tiny)
        tl.store(out_ptr + b * stride_out + v, noise, mask=v < V)

    @triton.jit
    def _ordered_key(x):
        """float32 -> int64 in [0, 2**32), in the floats' order (negative floats' bits reversed)."""
        bits = x.to(tl.int32, bitcast=True).to(tl.int64)
        return tl.where(bits >= 0, bits + 2147483648, -1 - bits)

    @triton.jit
    def _kth_largest_key(key, valid, k):
        """The k-th largest of the valid keys (k >= 1): the largest T with at least k keys >= T, built bit by bit."""
        found = tl.zeros([], dtype=tl.int64)
        for bit in tl.static_range(32):
            candidate = found + (1 << (31 - bit))
            count = tl.sum(tl.where(valid & (key >= candidate), 1, 0), axis=0)
            found = tl.where(count >= k, candidate, found)
        return found

    @triton.jit
    def _nucleus_floor_key(key, prob, limit):
        """The largest T whose mass of keys <= T is at most `limit`: the reference removes exactly the tokens
        whose key is at most T (its ascending cumulative mass at them is at most 1 - p)."""
        found = tl.zeros([], dtype=tl.int64)
        for bit in tl.static_range(32):
            candidate = found + (1 << (31 - bit))
            mass = tl.sum(tl.where(key <= candidate, prob, 0.0), axis=0)
            found = tl.where(mass <= limit, candidate, found)
        return found

    @triton.jit
    def _sample_kernel(logits_ptr, stride_logits, rows_ptr, stride_rows, seen_ptr, stride_seen, suppressed_ptr,
                       eos_blocked_ptr, stride_eos_blocked, eos_id, temperature_ptr, stride_temperature, top_k_ptr, stride_top_k, top_p_ptr, stride_top_p,
                       penalty_ptr, stride_penalty, greedy_ptr, stride_greedy, noise_ptr, stride_noise, keys_ptr,
                       stride_keys, noise_offset, out_ptr, stride_out, V, tiny,
                       HAS_ROWS: tl.constexpr, HAS_PENALTY: tl.constexpr, HAS_SUPPRESS: tl.constexpr,
                       NOISE_IN_MEMORY: tl.constexpr, BLOCK_V: tl.constexpr):
        """Program b: row b's token, as `layers/sampling.sample` draws it (see the module's docstring)."""
        b = tl.program_id(0)
        row = tl.load(rows_ptr + b * stride_rows) if HAS_ROWS else b
        v = tl.arange(0, BLOCK_V)
        valid = v < V
        logits = tl.load(logits_ptr + row * stride_logits + v, mask=valid, other=float("-inf")).to(tl.float32)
        if HAS_PENALTY:  # HF's repetition penalty on the tokens this row emitted before
            seen = tl.load(seen_ptr + row * stride_seen + v, mask=valid, other=0) != 0
            penalty = tl.load(penalty_ptr + b * stride_penalty)
            logits = tl.where(seen, tl.where(logits < 0, logits * penalty, logits / penalty), logits)
        if HAS_SUPPRESS:
            blocked = tl.load(suppressed_ptr + v, mask=valid, other=1) != 0
            eos_blocked = tl.load(eos_blocked_ptr + b * stride_eos_blocked) != 0
            blocked = tl.where(v == eos_id, eos_blocked, blocked)
            logits = tl.where(blocked, float("-inf"), logits)
        greedy = tl.argmax(logits, axis=0, tie_break_left=True)
        warped = logits / tl.load(temperature_ptr + b * stride_temperature)
        key = _ordered_key(warped)
        top = tl.max(warped, axis=0)
        k = tl.load(top_k_ptr + b * stride_top_k)
        kept = valid
        if (k > 0) & (k <= V):
            kept = valid & (key >= _kth_largest_key(key, valid, k))
        weights = tl.where(kept, tl.exp(warped - top), 0.0)
        prob = weights / tl.sum(weights, axis=0)
        limit = 1.0 - tl.load(top_p_ptr + b * stride_top_p)
        if limit > 0.0:  # top-p < 1 (at 1 the reference removes only tokens of probability 0: none could be drawn)
            kept = kept & ((key > _nucleus_floor_key(key, prob, limit)) | (warped == top))
            weights = tl.where(kept, tl.exp(warped - top), 0.0)
            prob = weights / tl.sum(weights, axis=0)
        if NOISE_IN_MEMORY:
            noise = tl.load(noise_ptr + b * stride_noise + v, mask=valid, other=1.0)
        else:
            noise = _exponential(keys_ptr, stride_keys, b, noise_offset + v.to(tl.int64), tiny)
        drawn = tl.argmax(tl.where(valid, prob / noise, -1.0), axis=0, tie_break_left=True)
        token = tl.where(tl.load(greedy_ptr + b * stride_greedy) != 0, greedy, drawn)
        tl.store(out_ptr + b * stride_out, token.to(tl.int64))
        if HAS_PENALTY:
            tl.store(seen_ptr + row * stride_seen + token, tl.full([], 1, dtype=tl.uint8))
