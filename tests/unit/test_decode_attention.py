"""The decode steps' split-KV attention as Triton kernels (`kernels/decode_attention.py`): the kernel against its
PyTorch reference and `attend`'s masked path, its splits against one split, `attend`'s choice of it, the split
count, the knobs, and on CUDA against varlen flash attention, in a CUDA graph and under torch.compile.

On a CUDA machine the kernel tests run on the GPU. Without one they run under Triton's interpreter on the CPU
(`TRITON_INTERPRET=1`, set before Triton compiles anything, so a process of its own:
`test_the_kernel_tests_pass_under_the_interpreter`). Without Triton installed they skip: the kernel is an opt-in
speed-up of the CUDA path, and decode steps keep flash attention there."""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from backend_python.models.kernels import decode_attention
from backend_python.models.layers import decoder
from backend_python.models.layers.decoder import KVCache, Step, attend
from tests.interpreter import needs_interpreter_run, run_under_interpreter
from tests.unit.lm_graph_helpers import needs_cuda

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
runs_kernel = pytest.mark.skipif(not decode_attention.is_available(torch.device(DEVICE)),
                                 reason="needs CUDA, or Triton's interpreter (TRITON_INTERPRET=1)")
# a row of 1 key, a tile's 16, one not a multiple of it, several tiles (the tests' tile is 16 keys)
NUM_KEYS = [1, 16, 21, 40]
TOLERANCE = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.bfloat16: dict(atol=2e-2, rtol=2e-2)}


@needs_interpreter_run
def test_the_kernel_tests_pass_under_the_interpreter():
    run_under_interpreter(__file__, "kernel and not under_the_interpreter and not on_cuda")


def pooled(num_keys: list[int], num_heads: int, num_kv_heads: int, dim: int, dtype: torch.dtype,
           seed: int = 0, device: str = DEVICE) -> tuple[torch.Tensor, KVCache, Step, Step]:
    """q [B, 1, heads, dim], a one-layer pooled cache of random keys with row b's extent num_keys[b] + 2 long, the
    rows placed in reverse order with a gap of 3 positions between extents, and the decode step at position
    num_keys[b] - 1 of each row, built for the varlen path and for the masked one."""
    gen = torch.Generator().manual_seed(seed)
    extents = [n + 2 for n in num_keys]
    cache = KVCache.allocate(1, len(num_keys), num_kv_heads, max(extents), dim, device, dtype,
                             pool_positions=sum(extents) + 3 * len(extents), is_varlen=True)
    cache.k.copy_(torch.randn(cache.k.shape, generator=gen).to(dtype))
    cache.v.copy_(torch.randn(cache.v.shape, generator=gen).to(dtype))
    start = 0
    for row in reversed(range(len(num_keys))):
        cache.place(row, start, extents[row])
        start += extents[row] + 3
    rows = torch.arange(len(num_keys), device=device)
    positions = torch.tensor(num_keys, device=device)[:, None] - 1
    q = torch.randn(len(num_keys), 1, num_heads, dim, generator=gen).to(dtype).to(device)
    step = Step.build(rows, positions, dim, 10000.0, cache, dtype)
    masked = Step.build(rows, positions, dim, 10000.0, replace(cache, is_varlen=False), dtype)
    return q, cache, step, masked


def run_kernel(q: torch.Tensor, cache: KVCache, step: Step, **launch) -> torch.Tensor:
    return decode_attention.decode_attention(q, cache.k[0], cache.v[0], step.key_starts, step.num_keys,
                                             step.max_keys, **launch)


@runs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("group", [1, 2, 4])
@pytest.mark.parametrize("dim", [64, 128])
@pytest.mark.parametrize("num_splits", [1, 3])
def test_the_kernel_is_its_reference(dtype, group, dim, num_splits):
    """Rows out of order with gaps, 1 / 16 / 21 / 40 keys on 16-key tiles; one split, and three (the 1-key
    row's later splits empty); GQA groups of 1, 2 and 4 over 2 KV heads."""
    q, cache, step, _ = pooled(NUM_KEYS, 2 * group, 2, dim, dtype)
    expected = decode_attention.decode_attention_reference(q, cache.k[0], cache.v[0], step.key_starts, step.num_keys)
    got = run_kernel(q, cache, step, num_splits=num_splits, block_keys=16)
    assert got.shape == q.shape and got.dtype == dtype
    torch.testing.assert_close(got.float(), expected.float(), **TOLERANCE[dtype])


@runs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_kernel_is_attend_s_masked_path(dtype):
    """The default launch and split count against `attend` over the masked step (the CPU's path)."""
    q, cache, step, masked = pooled([70, 1, 33, 64, 5], 4, 2, 64, dtype, seed=1)
    expected = attend(q, cache.k[0], cache.v[0], masked)
    torch.testing.assert_close(run_kernel(q, cache, step).float(), expected.float(), **TOLERANCE[dtype])


@runs_kernel
@pytest.mark.parametrize("num_splits", [2, 5, decode_attention.MAX_SPLITS])
def test_the_kernel_s_splits_combine_to_the_one_split_output(num_splits):
    q, cache, step, _ = pooled([100, 1, 47, 16], 4, 2, 64, torch.float32, seed=2)
    one = run_kernel(q, cache, step, num_splits=1, block_keys=16)
    torch.testing.assert_close(run_kernel(q, cache, step, num_splits=num_splits, block_keys=16), one,
                               atol=1e-5, rtol=1e-5)


@runs_kernel
def test_the_kernel_reads_only_a_row_s_own_keys():
    """Keys past a row's count, in the gaps and in the scratch row do not move its output."""
    q, cache, step, _ = pooled(NUM_KEYS, 4, 2, 64, torch.float32, seed=3)
    before = run_kernel(q, cache, step, num_splits=3, block_keys=16)
    used = torch.zeros(cache.num_positions, dtype=torch.bool, device=DEVICE)
    for start, n in zip(step.key_starts.tolist(), NUM_KEYS):
        used[start:start + n] = True
    cache.k[0][~used] = 1e4
    cache.v[0][~used] = 1e4
    assert torch.equal(run_kernel(q, cache, step, num_splits=3, block_keys=16), before)


@runs_kernel
def test_attend_runs_the_kernel_for_a_decode_step_when_chosen(monkeypatch):
    monkeypatch.setattr(decode_attention, "BACKEND", "triton")
    calls = []
    kernel = decode_attention.decode_attention
    monkeypatch.setattr(decode_attention, "decode_attention", lambda *args: calls.append(args) or kernel(*args))
    q, cache, step, masked = pooled([9, 30], 4, 2, 64, torch.float32, seed=4)
    with torch.no_grad():
        got = attend(q, cache.k[0], cache.v[0], step)
    assert len(calls) == 1
    torch.testing.assert_close(got, attend(q, cache.k[0], cache.v[0], masked), atol=1e-5, rtol=1e-5)


@runs_kernel
def test_the_kernel_is_enabled_by_the_setting_for_a_head_dim_it_tiles(monkeypatch):
    q = torch.zeros(2, 1, 4, 64, device=DEVICE)
    monkeypatch.setattr(decode_attention, "BACKEND", "flash")
    assert not decode_attention.is_enabled(q)
    monkeypatch.setattr(decode_attention, "BACKEND", "triton")
    assert decode_attention.is_enabled(q)
    assert not decode_attention.is_enabled(torch.zeros(2, 1, 4, 80, device=DEVICE))


def test_attend_keeps_flash_attention_for_all_but_a_chosen_inference_decode_step(monkeypatch):
    """Flash attention for a prefill (T > 1), with autograd recording, and where the setting is `flash`; the
    masked path (the CPU's) never reaches either."""
    flash_calls = []
    monkeypatch.setattr(decoder, "varlen_attention", lambda q, *args: flash_calls.append(q.shape[1]) or q)
    monkeypatch.setattr(decode_attention, "is_enabled", lambda q: decode_attention.BACKEND == "triton")
    monkeypatch.setattr(decode_attention, "decode_attention", lambda *args: pytest.fail("the kernel ran"))
    _, cache, step, masked = pooled([5, 7], 4, 2, 16, torch.float32, device="cpu")
    decode, prefill = torch.zeros(2, 1, 4, 16), torch.zeros(2, 3, 4, 16)
    with torch.no_grad():
        attend(decode, cache.k[0], cache.v[0], step)  # BACKEND flash
        monkeypatch.setattr(decode_attention, "BACKEND", "triton")
        attend(prefill, cache.k[0], cache.v[0], step)
        attend(decode, cache.k[0], cache.v[0], masked)
    attend(decode, cache.k[0], cache.v[0], step)  # grad enabled
    assert flash_calls == [1, 3, 1]


def test_the_split_count_gives_small_batches_two_programs_per_sm():
    target = decode_attention.NUM_SMS * decode_attention.PROGRAMS_PER_SM
    assert decode_attention.num_splits_for(128, 8, 4096) == 1
    assert decode_attention.num_splits_for(32, 8, 4096) == 2
    assert decode_attention.num_splits_for(16, 8, 4096) == 3
    assert decode_attention.num_splits_for(1, 8, 4096) == decode_attention.MAX_SPLITS
    assert decode_attention.num_splits_for(1, 8, 40) == 3  # no more splits than 16-key slices of the longest row
    assert decode_attention.num_splits_for(1, 8, 4096, num_sms=16) == 4
    for rows in range(1, 300):
        splits = decode_attention.num_splits_for(rows, 8, 4096)
        assert splits == 1 or (splits - 1) * rows * 8 < target  # the fewest that reach the target
        assert splits * rows * 8 >= target or splits == decode_attention.MAX_SPLITS


def test_the_settings_parse_and_name_their_variable_on_a_bad_value():
    assert decode_attention.backend_setting(None) == "flash"
    assert decode_attention.backend_setting("triton") == "triton"
    for bad in ("Triton", "", "fa3"):
        with pytest.raises(ValueError, match="VOXLANE_DECODE_ATTENTION must be one of flash, triton"):
            decode_attention.backend_setting(bad)
    assert decode_attention.launch_setting(None) == decode_attention.DEFAULT_LAUNCH
    assert decode_attention.launch_setting("32,8") == (32, 8)
    for bad in ("32", "a,b", "24,4", "8,4", "64,3"):
        with pytest.raises(ValueError, match="VOXLANE_DECODE_ATTENTION_LAUNCH"):
            decode_attention.launch_setting(bad)


def test_a_bad_setting_stops_the_import_naming_its_variable():
    env = {**os.environ, "VOXLANE_DECODE_ATTENTION": "flash2"}
    result = subprocess.run([sys.executable, "-c", "import backend_python.models.kernels.decode_attention"],
                            env=env, capture_output=True, text=True, cwd=Path(__file__).parents[2], timeout=120)
    assert result.returncode != 0 and "VOXLANE_DECODE_ATTENTION must be one of" in result.stderr


def test_the_microbench_parses_its_arguments():
    from server.microbench.decode_attention import parse_args

    args = parse_args(["--rows", "1", "128", "--launches", "64,4", "32,2"])
    assert args.rows == [1, 128] and args.contexts == [256, 1024] and args.launches == [(64, 4), (32, 2)]
    assert args.model == "qwen3-tts-1.7b"
    with pytest.raises(SystemExit):
        parse_args(["--launches", "63,4"])


@needs_cuda
@pytest.mark.parametrize("rows", [1, 32, 128])
def test_the_kernel_matches_flash_varlen_on_cuda(rows):
    """The talker's shapes (16 query heads over 8 KV heads of 128, bf16), ~263 keys a row, rows out of order."""
    num_keys = [200 + (37 * row) % 130 for row in range(rows)]
    q, cache, step, _ = pooled(num_keys, 16, 8, 128, torch.bfloat16, seed=5)
    expected = decoder.varlen_attention(q, cache.k[0], cache.v[0], step)
    torch.testing.assert_close(run_kernel(q, cache, step).float(), expected.float(), atol=2e-2, rtol=2e-2)


@needs_cuda
def test_the_kernel_replays_in_a_cuda_graph_on_cuda():
    """Captured once, replayed over new queries and a longer row: the replay is the eager call on those."""
    q, cache, step, _ = pooled([40, 300, 7], 16, 8, 128, torch.bfloat16, seed=6)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        run_kernel(q, cache, step)  # compiles the kernels outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = run_kernel(q, cache, step)
    q.normal_()
    step.num_keys[1] += 1
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, run_kernel(q, cache, step))


@needs_cuda
def test_the_op_under_torch_compile_on_cuda():
    """A compiled caller (the layers are compiled with fullgraph on CUDA, the batch dimension dynamic) gets the
    eager output at a batch of several splits and at one of a single split."""
    compiled = torch.compile(lambda q, k, v, starts, num_keys: decode_attention.decode_attention(
        q, k, v, starts, num_keys, 512) * 2, fullgraph=True, dynamic=True)
    for rows in (3, 40):  # 11 splits, 1
        q, cache, step, _ = pooled([1 + (29 * row) % 300 for row in range(rows)], 16, 8, 128, torch.bfloat16)
        expected = decode_attention.decode_attention(q, cache.k[0], cache.v[0], step.key_starts, step.num_keys,
                                                     512) * 2
        got = compiled(q, cache.k[0], cache.v[0], step.key_starts, step.num_keys)
        torch.testing.assert_close(got, expected, atol=0, rtol=0)


@needs_cuda
def test_the_op_under_torch_compile_recompiles_at_most_once_over_the_batch_buckets():
    """The split count is a function of the (dynamic) batch, and the op branches on a single split: one guard, so
    the buckets 1-128 share at most two graphs (the frame's layers have a recompile limit of 8)."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = torch.compile(lambda q, k, v, starts, num_keys: decode_attention.decode_attention(
        q, k, v, starts, num_keys, 512), fullgraph=True, dynamic=True)
    for rows in (1, 2, 4, 8, 16, 32, 64, 128):
        q, cache, step, _ = pooled([1 + (29 * row) % 300 for row in range(rows)], 16, 8, 128, torch.bfloat16)
        compiled(q, cache.k[0], cache.v[0], step.key_starts, step.num_keys)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] <= 2
