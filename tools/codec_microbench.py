"""Codec lane latency per batch size: one window (new frames + left context) per request.

    CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25 python3 -m tools.codec_microbench --model qwen3-tts-1.7b

Reads the MPS percentage from the environment (set it, under a running MPS
daemon, to see the codec lane's partition), prints one JSON line per batch size.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch

from backend_python.models import registry


def time_windows(codec, batch_size: int, frames: int, context: int, repeats: int) -> float:
    """Median ms of one decode_windows call of `batch_size` windows."""
    codes = torch.randint(0, codec.codebook_size, (frames + context, codec.num_codebooks), device=codec.device)
    windows = [(codes, context)] * batch_size
    times = []
    with torch.inference_mode():
        for _ in range(repeats + 2):
            torch.cuda.synchronize()
            started = time.perf_counter()
            codec.decode_windows(windows)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - started) * 1e3)
    return statistics.median(times[2:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen3-tts-1.7b")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 4, 8, 16, 32])
    parser.add_argument("--frames", type=int, default=10, help="new frames per window (10 = 0.8 s)")
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    spec = registry.resolve(args.model)
    codec = registry.load_codec(spec, device="cuda", dtype=args.dtype)
    context = registry.family_of(spec).codec_left_context_frames(spec)
    pct = os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "100")
    for batch_size in args.batch_sizes:
        ms = time_windows(codec, batch_size, args.frames, context, args.repeats)
        print(json.dumps({"bench": "codec", "model": args.model, "mps_pct": int(pct), "batch": batch_size,
                          "frames": args.frames, "context": context, "ms": round(ms, 2)}), flush=True)


if __name__ == "__main__":
    main()
