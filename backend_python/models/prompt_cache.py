"""Cached voice prompts: the KV of a prompt's fixed prefix, computed once and copied into new streams.

Many requests start with the same positions: a voice's prompt prefix (a family's instructions, role tokens,
the codec tags with its speaker and language) comes before the first position that depends on the request's
own text. A family that declares such a prefix (`PrefixKey`, its length) prefills a request whose prefix is
cached by copying the prefix's keys and values into the stream's KV extent (positions 0 .. P - 1) and running
only its own positions from P; a miss prefills the whole prompt, as without the cache, and keeps the prefix's
KV for the next request.

The cache is an LRU of KV tensors under a byte budget (`budget_bytes`; 0: no cache), keyed by the prefix's
content: its token ids and, for a cloned voice, a digest of its speaker embedding's bytes, so a voice that
changes is another key and never meets a stale entry. `forget(speaker)` drops a cloned voice's entries (the LM
lane calls it when a registered voice is deleted). One lock guards the table: the LM's thread looks up and
stores, Triton's thread forgets and the metrics thread reads the counts.
"""
from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass

import torch

from .layers.decoder import KVCache

MIB = 1 << 20


@dataclass(frozen=True)
class PrefixKey:
    """What a prompt prefix's positions hold, in the family's words: groups of ids (a family's text ids, its codec
    ids), and the digest of a cloned voice's speaker embedding (None: a preset voice)."""

    ids: tuple[tuple[int, ...], ...]
    speaker: str | None = None


def speaker_digest(embedding: torch.Tensor) -> str:
    """A speaker embedding's identity: sha256 of its dtype, shape and bytes (on the CPU: a prompt's tensors are)."""
    array = embedding.detach().cpu().contiguous()
    digest = hashlib.sha256(f"{array.dtype}{tuple(array.shape)}".encode())
    digest.update(array.numpy().tobytes())
    return digest.hexdigest()


@dataclass(frozen=True)
class CachedPrefix:
    """A prefix's keys and values: k, v [layers, P, kv_heads, head_dim], on the KV cache's device and dtype."""

    k: torch.Tensor
    v: torch.Tensor

    @property
    def num_positions(self) -> int:
        return self.k.shape[1]

    @property
    def num_bytes(self) -> int:
        return 2 * self.k.numel() * self.k.element_size()

    @classmethod
    def read(cls, cache: KVCache, row: int, num_positions: int) -> "CachedPrefix":
        """Copy row `row`'s positions 0 .. num_positions - 1 out of the cache (a gather on the device, no wait)."""
        index = _pool_index(cache, row, num_positions)
        return cls(cache.k[:, index].clone(), cache.v[:, index].clone())

    def write(self, cache: KVCache, row: int) -> None:
        """Copy the prefix into row `row`'s positions 0 .. P - 1 (the row's extent is placed already)."""
        index = _pool_index(cache, row, self.num_positions)
        cache.k[:, index] = self.k
        cache.v[:, index] = self.v


def _pool_index(cache: KVCache, row: int, num_positions: int) -> torch.Tensor:
    """[P] int64: the pool positions of a row's first P positions, computed on the device (no host read)."""
    positions = torch.arange(num_positions, device=cache.k.device)[None]  # [1, P]
    rows = torch.full((1,), row, device=cache.k.device, dtype=torch.int64)
    return cache.write_index(rows, positions)[0]


@dataclass(frozen=True)
class PromptCacheStats:
    """The cache's counts since it was made, and what it holds now."""

    hits: int
    misses: int
    num_bytes: int
    num_entries: int


class PromptCache:
    """An LRU of `CachedPrefix` by `PrefixKey`, at most `budget_bytes` of tensors."""

    def __init__(self, budget_bytes: int) -> None:
        if budget_bytes < 1:
            raise ValueError(f"a prompt cache needs a budget >= 1 byte, got {budget_bytes} (0 means no cache)")
        self.budget_bytes = budget_bytes
        self._entries: OrderedDict[PrefixKey, CachedPrefix] = OrderedDict()
        self._lock = threading.Lock()
        self._num_bytes = self._hits = self._misses = 0

    @classmethod
    def of_mib(cls, budget_mib: int) -> "PromptCache | None":
        """A cache of `budget_mib` MiB; None for 0 (no cache)."""
        return cls(budget_mib * MIB) if budget_mib > 0 else None

    def get(self, key: PrefixKey) -> CachedPrefix | None:
        """The prefix's KV, or None; counts a hit or a miss."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self._misses += 1
                return None
            self._hits += 1
            self._entries.move_to_end(key)
            return entry

    def put(self, key: PrefixKey, entry: CachedPrefix) -> None:
        """Keep `entry`, dropping the least recently used until it fits; one larger than the budget is not kept."""
        if entry.num_bytes > self.budget_bytes:
            return
        with self._lock:
            self._drop(key)
            while self._num_bytes + entry.num_bytes > self.budget_bytes:
                self._drop(next(iter(self._entries)))
            self._entries[key] = entry
            self._num_bytes += entry.num_bytes

    def restore(self, key: PrefixKey, cache: KVCache, row: int) -> int:
        """Copy the prefix's KV into `row` where it is cached -> the positions it fills (0 on a miss)."""
        entry = self.get(key)
        if entry is None:
            return 0
        entry.write(cache, row)
        return entry.num_positions

    def keep(self, key: PrefixKey, cache: KVCache, row: int, num_positions: int) -> None:
        """After a miss's whole prefill: keep `row`'s first num_positions positions as the prefix of `key`."""
        self.put(key, CachedPrefix.read(cache, row, num_positions))

    def forget(self, speaker: str) -> int:
        """Drop every entry of the cloned voice whose embedding digest is `speaker` -> how many went."""
        with self._lock:
            keys = [key for key in self._entries if key.speaker == speaker]
            for key in keys:
                self._drop(key)
            return len(keys)

    def stats(self) -> PromptCacheStats:
        with self._lock:
            return PromptCacheStats(self._hits, self._misses, self._num_bytes, len(self._entries))

    def _drop(self, key: PrefixKey) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._num_bytes -= entry.num_bytes
