"""The talker's decode attention: varlen flash attention (today's path) against the split-KV Triton kernel
(`kernels/decode_attention.py`), GPU time of one call inside a CUDA graph and the KV bandwidth each reaches.

    python3 -m server.microbench.decode_attention [--rows 1 32 128] [--contexts 256 1024] [--launches 64,4 32,4]
    python3 -m server.microbench.decode_attention --model qwen3-tts-0.6b --json OUT

Shapes are the preset's talker (query heads, KV heads, head_dim), bf16, one decode step with `context` keys in
every row, the rows placed in a pooled cache in reverse order. Each call of a graph reads another layer's cache,
and the layers cycled through hold at least 256 MiB, so the keys come from HBM as in the frame (which reads GBs
of weights between two calls of one layer), not from L2. One JSON line per (rows, context): µs per call, the KV
bytes a call must read, the bandwidth reached, each time against the read at BANDWIDTH_BYTES_PER_S (the H200's
copy bandwidth: "x_read"), the kernel's split count and its largest difference from flash attention. With
`--compiled`, each launch is timed a second time as the frame runs it, through torch.compile (Inductor launches
the kernel from its own wrapper), with the graphs compiled for it counted.
"""
from __future__ import annotations

import argparse
import json

import torch

from backend_python.models.kernels import decode_attention
from backend_python.models.layers.decoder import KVCache, Step, varlen_attention
from backend_python.models.qwen3_tts import preset_config

from server.microbench.frame_floor import BANDWIDTH_BYTES_PER_S
from server.microbench.short_attention import time_call

MIN_BYTES_CYCLED = 256 << 20  # KV the graph's calls read between two calls of one layer (L2 is 50-60 MB)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="qwen3-tts-1.7b", help="a Qwen3-TTS preset: its talker's attention shape")
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 32, 128])
    parser.add_argument("--contexts", type=int, nargs="+", default=[256, 1024], help="keys per row")
    parser.add_argument("--launches", type=decode_attention.launch_setting, nargs="+",
                        default=[decode_attention.DEFAULT_LAUNCH],
                        help="the kernel's KEYS,WARPS settings to time (VOXLANE_DECODE_ATTENTION_LAUNCH's form)")
    parser.add_argument("--compiled", action="store_true",
                        help="also time each launch inside torch.compile, as the frame's compiled layers call it")
    parser.add_argument("--json", default=None, help="also write every point to this file")
    args = parser.parse_args(argv)
    if min(args.rows + args.contexts) < 1:
        parser.error("--rows and --contexts must be >= 1")
    return args


def pooled_step(rows: int, context: int, num_kv_heads: int, head_dim: int,
                device: torch.device) -> tuple[KVCache, Step]:
    """A varlen cache of enough layers for MIN_BYTES_CYCLED, rows placed in reverse order, and the decode step
    at position context - 1 of every row (context keys each)."""
    layer_bytes = 2 * rows * context * num_kv_heads * head_dim * 2  # K and V in bf16
    num_layers = max(2, -(-MIN_BYTES_CYCLED // layer_bytes))
    cache = KVCache.allocate(num_layers, rows, num_kv_heads, context, head_dim, device, torch.bfloat16,
                             pool_positions=rows * context, is_varlen=True)
    for row in range(rows):
        cache.place(row, (rows - 1 - row) * context, context)
    cache.k.normal_(), cache.v.normal_()
    positions = torch.full((rows, 1), context - 1, device=device)
    return cache, Step.build(torch.arange(rows, device=device), positions, head_dim, 1e6, cache, torch.bfloat16)


def compiled_graphs() -> int:
    from torch._dynamo.utils import counters
    return int(counters["stats"]["unique_graphs"])


def measure(rows: int, context: int, heads: int, num_kv_heads: int, head_dim: int, launches: list,
            device: torch.device, compiled: bool = False) -> dict:
    """One point: flash and each launch of the kernel, µs per call and TB/s of the KV read."""
    cache, step = pooled_step(rows, context, num_kv_heads, head_dim, device)
    q = torch.randn(rows, 1, heads, head_dim, device=device, dtype=torch.bfloat16)
    layers = range(cache.k.shape[0])
    kv_bytes = 2 * rows * context * num_kv_heads * head_dim * 2
    splits = decode_attention.num_splits_for(rows, num_kv_heads, step.max_keys)
    read_us = kv_bytes / BANDWIDTH_BYTES_PER_S * 1e6
    point = {"rows": rows, "context": context, "splits": splits, "layers_cycled": len(layers),
             "kv_mib": round(kv_bytes / 2 ** 20, 2), "read_us": round(read_us, 2)}

    def record(name: str, call) -> None:
        us = time_call(lambda: [call(layer) for layer in layers], calls_per_graph=1) / len(layers)
        point.update({f"{name}_us": round(us, 2), f"{name}_tb_s": round(kv_bytes / us / 1e6, 3),
                      f"{name}_x_read": round(us / read_us, 2)})

    flash = lambda layer: varlen_attention(q, cache.k[layer], cache.v[layer], step)  # noqa: E731
    record("flash", flash)
    expected = flash(0).float()
    for keys, warps in launches:
        def kernel(layer: int, keys: int = keys, warps: int = warps) -> torch.Tensor:
            return decode_attention.decode_attention(q, cache.k[layer], cache.v[layer], step.key_starts,
                                                     step.num_keys, step.max_keys, block_keys=keys, num_warps=warps)
        record(f"triton_{keys},{warps}", kernel)
        point[f"triton_{keys},{warps}_max_error"] = round((kernel(0).float() - expected).abs().max().item(), 4)
        if compiled:
            def attend(q, k, v, starts, num_keys, keys: int = keys, warps: int = warps) -> torch.Tensor:
                return decode_attention.decode_attention(q, k, v, starts, num_keys, step.max_keys, block_keys=keys,
                                                         num_warps=warps)
            attend = torch.compile(attend, fullgraph=True)
            before = compiled_graphs()
            record(f"triton_{keys},{warps}_compiled",
                   lambda layer: attend(q, cache.k[layer], cache.v[layer], step.key_starts, step.num_keys))
            point[f"triton_{keys},{warps}_compiled_graphs"] = compiled_graphs() - before
    return point


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("decode_attention microbench: needs a CUDA device")
    talker = preset_config(args.model).talker
    shape = (talker.num_attention_heads, talker.num_key_value_heads, talker.head_dim)
    points = []
    for context in args.contexts:
        for rows in args.rows:
            points.append(measure(rows, context, *shape, args.launches, torch.device("cuda"), args.compiled))
            print(json.dumps(points[-1]), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "heads": shape, "points": points}, f, indent=1)


if __name__ == "__main__":
    main()
