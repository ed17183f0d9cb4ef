"""KV block bookkeeping: contiguous runs, first fit, coalescing, and the counts the gauges export."""
from __future__ import annotations

import pytest

from scheduler import Extent, KVBlocks


def test_extents_are_whole_blocks_placed_first_fit():
    blocks = KVBlocks(160, block_size=16)
    assert blocks.allocate(20) == Extent(0, 32)
    assert blocks.allocate(16) == Extent(32, 16)
    assert (blocks.num_used_blocks, blocks.num_free_blocks) == (3, 7)


def test_a_freed_run_is_reused_and_merges_with_its_free_neighbours():
    blocks = KVBlocks(64, block_size=16)
    a, b, c, d = (blocks.allocate(16) for _ in range(4))
    assert blocks.allocate(1) is None  # full
    blocks.free(b)
    blocks.free(c)  # merges with b's run: two blocks in one run
    assert blocks.largest_free_positions == 32
    assert blocks.allocate(32) == Extent(16, 32)
    blocks.free(a)
    blocks.free(d)
    assert blocks.num_free_blocks == 2 and blocks.largest_free_positions == 16  # split: 0..15 and 48..63


def test_memory_split_in_short_runs_does_not_fit_a_long_extent():
    blocks = KVBlocks(48, block_size=16)
    a, b, c = (blocks.allocate(16) for _ in range(3))
    blocks.free(a)
    blocks.free(c)
    assert blocks.num_free_blocks == 2 and not blocks.can_allocate(32) and blocks.allocate(32) is None
    blocks.free(b)
    assert blocks.allocate(48) == Extent(0, 48)


def test_freeing_twice_is_an_error():
    blocks = KVBlocks(64, block_size=16)
    extent = blocks.allocate(16)
    blocks.free(extent)
    with pytest.raises(ValueError, match="freed twice"):
        blocks.free(extent)


def test_a_pool_smaller_than_a_block_is_refused():
    with pytest.raises(ValueError):
        KVBlocks(8, block_size=16)
