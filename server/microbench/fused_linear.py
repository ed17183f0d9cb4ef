"""The fused matmul's launches against PyTorch's kernels, on the LM frame's projections (GPU).

    python3 -m server.microbench.fused_linear --model qwen3-tts-1.7b --rows 1 8 32 128 --json fused_linear.json

For each projection of a Qwen3-TTS frame (the talker's and the predictor's q/k/v with the input norm, o with the
residual, gate/up with the post-attention norm and SwiGLU, down with the residual; the predictor's head with the
final norm and its input projection) and each row count: the PyTorch path (`fused_linear.torch_linear`: cuBLAS and
the separate norm, SwiGLU and residual kernels), `launch_for`'s launch and a few others, each as GPU µs per call
inside a CUDA graph of back-to-back calls (`short_attention.time_call`) over rotating weight copies (more bytes than
the L2 holds, so every call reads its weights from memory), and the weight bandwidth that time gives. The last
lines sum one of each projection per row count.
"""
from __future__ import annotations

import argparse
import json

import torch

from backend_python.models.kernels import fused_linear as fl
from backend_python.models.qwen3_tts import preset_config
from server.microbench.short_attention import time_call

L2_BYTES = 64 << 20  # more than an H100's (50 MiB) or H200's (60 MiB) L2: rotate weights past it


def projections(model: str) -> list[tuple[str, int, int, dict]]:
    """(name, outputs, inputs, fused parts) of each projection a frame runs."""
    t = preset_config(model).talker
    p = t.code_predictor
    shapes = []
    for stack, hidden, inter, heads, kv_heads, dim in (
            ("talker", t.hidden_size, t.intermediate_size, t.num_attention_heads, t.num_key_value_heads, t.head_dim),
            ("predictor", p.hidden_size, p.intermediate_size, p.num_attention_heads, p.num_key_value_heads, p.head_dim)):
        shapes += [(f"{stack}.qkv", (heads + 2 * kv_heads) * dim, hidden, dict(norm=True)),
                   (f"{stack}.o", hidden, heads * dim, dict(residual=True)),
                   (f"{stack}.gate_up", inter, hidden, dict(norm=True, swiglu=True)),
                   (f"{stack}.down", hidden, inter, dict(residual=True))]
    shapes.append(("predictor.head", p.vocab_size, p.hidden_size, dict(norm=True, logits=True)))
    if p.hidden_size != t.hidden_size:
        shapes.append(("predictor.projection", p.hidden_size, t.hidden_size, dict(bias=True)))
    return shapes


def candidates(rows: int, n: int, k: int) -> list[fl.Launch]:
    """`launch_for`'s launch first (and with 3 stages), then per tile the two largest K splits that keep the programs
    within twice TARGET_PROGRAMS."""
    chosen = fl.launch_for(rows, n, k)
    block_m = chosen.block_m
    tiles = [(64, 128), (32, 128), (64, 256), (128, 64), (128, 128)] if rows <= 32 else [(128, 64), (64, 64), (64, 128)]
    launches = [chosen, fl.Launch(chosen.block_m, chosen.block_n, chosen.block_k, chosen.split_k, chosen.num_warps, 3)]
    for block_n, block_k in tiles:
        tiles_mn = -(-rows // block_m) * -(-n // block_n)
        splits = [split for split in (1, 2, 4, 8, 16) if k % (block_k * split) == 0 and k // split >= block_k
                  and (split == 1 or tiles_mn * split <= 2 * fl.TARGET_PROGRAMS)]
        for split in splits[-2:]:
            launch = fl.Launch(block_m, block_n, block_k, split, 4 if block_m <= 32 else 8, 4 if block_m <= 32 else 3)
            if launch not in launches:
                launches.append(launch)
    return launches


def rotating(call, weights: list[torch.Tensor]):
    """A call that takes the next weight copy each time (a graph of len(weights) calls reads each once)."""
    index = iter(range(1 << 62))
    return lambda: call(weights[next(index) % len(weights)])


def measure(name: str, n: int, k: int, parts: dict, rows: int, max_launches: int) -> dict:
    dtype, device = torch.bfloat16, torch.device("cuda")
    width = 2 * n if parts.get("swiglu") else n
    weight_bytes = width * k * 2
    copies = max(2, -(-L2_BYTES // weight_bytes))
    gen = torch.Generator(device=device).manual_seed(0)
    weights = [torch.randn(width, k, device=device, dtype=dtype, generator=gen) * k ** -0.5 for _ in range(copies)]
    x = torch.randn(rows, k, device=device, dtype=dtype, generator=gen)
    args = dict(norm_weight=torch.rand(k, device=device, dtype=dtype, generator=gen) + 0.5 if parts.get("norm") else None,
                eps=1e-6, bias=torch.randn(width, device=device, dtype=dtype, generator=gen) if parts.get("bias") else None,
                residual=torch.randn(rows, n, device=device, dtype=dtype, generator=gen) if parts.get("residual") else None,
                swiglu=bool(parts.get("swiglu")), out_dtype=torch.float32 if parts.get("logits") else None)
    row = {"projection": name, "rows": rows, "n": n, "k": k, "weight_mb": round(weight_bytes / 1e6, 2),
           "torch_us": time_call(rotating(lambda w: fl.torch_linear(x, w, **args), weights), copies)}
    timings = []
    for launch in candidates(rows, n, k)[:max_launches]:
        try:
            us = time_call(rotating(lambda w: fl.fused_linear(x, w, **args, launch=launch), weights), copies)
        except Exception as exc:  # noqa: BLE001 (a launch the GPU cannot run: out of shared memory, ...): report it
            print(f"# {name} rows {rows} {launch}: {type(exc).__name__}: {str(exc)[:120]}")
            continue
        timings.append((us, launch))
    chosen_us = timings[0][0] if timings else float("nan")
    best_us, best = min(timings, key=lambda item: item[0]) if timings else (float("nan"), None)
    row.update(chosen_us=chosen_us, chosen=str(fl.launch_for(rows, n, k)), best_us=best_us, best=str(best),
               torch_tbps=weight_bytes / row["torch_us"] / 1e6, best_tbps=weight_bytes / best_us / 1e6,
               launches=[[round(us, 2), str(launch)] for us, launch in sorted(timings, key=lambda item: item[0])])
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen3-tts-1.7b")
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 8, 32, 128])
    parser.add_argument("--max-launches", type=int, default=12, help="launches timed per projection and row count")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    print(f"# {torch.cuda.get_device_name()} torch {torch.__version__}; GPU µs per call in a graph, TB/s of weights")
    print("projection | rows | weight MB | torch µs | launch_for µs | best µs | best launch | torch TB/s | best TB/s")
    results = []
    for rows in args.rows:
        for name, n, k, parts in projections(args.model):
            row = measure(name, n, k, parts, rows, args.max_launches)
            results.append(row)
            print(f"{name} | {rows} | {row['weight_mb']} | {row['torch_us']:.1f} | {row['chosen_us']:.1f} | "
                  f"{row['best_us']:.1f} | {row['best']} | {row['torch_tbps']:.2f} | {row['best_tbps']:.2f}", flush=True)
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(results, f, indent=1)
    for rows in args.rows:
        frame = [r for r in results if r["rows"] == rows]
        print(f"# rows {rows}: torch {sum(r['torch_us'] for r in frame):.0f} µs, launch_for "
              f"{sum(r['chosen_us'] for r in frame):.0f} µs, best {sum(r['best_us'] for r in frame):.0f} µs "
              f"(one of each projection)")


if __name__ == "__main__":
    with torch.no_grad():
        main()
