"""The code predictor's one-kernel attention (`kernels/short_attention.py`) against PyTorch's kernels, per launch
setting: GPU time of one call at each batch size, timed as the engine runs it (inside a CUDA graph).

    python3 -m server.microbench.short_attention [--batch-sizes 1 32 128] [--json OUT]

Shapes are Qwen3-TTS's predictor (16 query heads over 8 KV heads of 128, a 16-position cache per row), bf16, a
later step (one token at position 8). "torch" is the same work in PyTorch's kernels (fused RMSNorm, RoPE, the
two cache writes, varlen flash attention), uncompiled. The last line names the fastest setting over all batch
sizes (the sum of its times), as `VOXLANE_SHORT_ATTENTION_LAUNCH` takes it.
"""
from __future__ import annotations

import argparse
import json

import torch

from backend_python.models.kernels import short_attention
from backend_python.models.layers.decoder import Attention, KVCache, Step, apply_rope

HEADS, KV_HEADS, DIM, POSITIONS = 16, 8, 128, 16
SETTINGS = [(heads, warps) for heads in (2, 1) for warps in (1, 2, 4, 8)]


def inputs(batch: int, device: torch.device) -> dict:
    qkv = torch.randn(batch, 1, (HEADS + 2 * KV_HEADS) * DIM, device=device, dtype=torch.bfloat16)
    cache = KVCache.allocate(1, batch, KV_HEADS, POSITIONS, DIM, device, torch.bfloat16)
    positions = torch.full((batch, 1), 8, device=device)
    step = Step.build(torch.arange(batch, device=device), positions, DIM, 1000000.0, cache, torch.bfloat16)
    weight = torch.ones(DIM, device=device, dtype=torch.bfloat16)
    return dict(qkv=qkv, q_weight=weight, k_weight=weight, eps=1e-6, cos=step.cos, sin=step.sin, positions=positions,
                write_index=step.write_index, key_starts=cache.row_starts.clone(), k_cache=cache.k[0],
                v_cache=cache.v[0], num_heads=HEADS, num_kv_heads=KV_HEADS, step=step)


def torch_path(args: dict) -> torch.Tensor:
    """The plain path's kernels for the same call (what `Attention.forward` runs before o_proj)."""
    qkv, step = args["qkv"], args["step"]
    b = qkv.shape[0]
    q, k, v = qkv.split((HEADS * DIM, KV_HEADS * DIM, KV_HEADS * DIM), dim=-1)
    q = torch.nn.functional.rms_norm(q.view(b, 1, HEADS, DIM), (DIM,), args["q_weight"], 1e-6)
    k = torch.nn.functional.rms_norm(k.view(b, 1, KV_HEADS, DIM), (DIM,), args["k_weight"], 1e-6)
    q, k = apply_rope(q, step.cos, step.sin), apply_rope(k, step.cos, step.sin)
    return Attention.write_and_attend(q, k, v.view(b, 1, KV_HEADS, DIM), step, args["k_cache"], args["v_cache"])


def time_call(call, calls_per_graph: int = 50, replays: int = 20) -> float:
    """µs of GPU time per call, `calls_per_graph` calls captured in one graph."""
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for _ in range(3):
            call()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls_per_graph):
            call()
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / (replays * calls_per_graph)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 32, 128])
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    device = torch.device("cuda")
    rows, totals = [], {}
    for batch in args.batch_sizes:
        call_args = inputs(batch, device)
        kernel_args = {k: v for k, v in call_args.items() if k != "step"}
        row = {"batch": batch, "torch_us": round(time_call(lambda: torch_path(call_args)), 2)}
        for heads, warps in SETTINGS:
            us = time_call(lambda: short_attention.short_cache_attention(
                **kernel_args, max_keys=POSITIONS, heads_per_program=heads, num_warps=warps))
            row[f"{heads},{warps}"] = round(us, 2)
            totals[f"{heads},{warps}"] = totals.get(f"{heads},{warps}", 0.0) + us
        rows.append(row)
        print(json.dumps(row), flush=True)
    best = min(totals, key=totals.get)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "best": best}, f, indent=1)
    print(best)


if __name__ == "__main__":
    main()
