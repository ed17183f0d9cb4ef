"""Where a codec window's GPU time goes: the lane's runner (with its graphs) timed, then the same windows eagerly
under torch.profiler, kernels grouped by name.

    python -m tools.profile_codec --model cosyvoice3-0.5b --frames 25 --batch 1 16

Prints, per batch size, the runner's wall time and the eager call's top CUDA kernels (total ms, count), so a
codec's floor can be told apart: launches (many short kernels), or compute (a few long ones).
"""
from __future__ import annotations

import argparse
import json
import time

import torch
from torch.profiler import ProfilerActivity, profile

from backend_python.engine.codec_runner import CodecRunner
from backend_python.models import registry


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="cosyvoice3-0.5b")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--frames", type=int, default=25, help="new frames per window")
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--compile", action="store_true", help="the runner's codec with its DiT blocks compiled "
                        "(`voxlane serve --codec-compile`)")
    args = parser.parse_args(argv)
    spec = registry.resolve(args.model)
    codec = registry.load_codec(spec, device="cuda", dtype=args.dtype)
    codec.use_torch_compile = args.compile
    windowing = registry.codec_windowing(spec)
    context = windowing.left_context_frames
    length = context + args.frames + windowing.lookahead_frames
    eager = registry.load_codec(spec, device="cuda", dtype=args.dtype)  # never captured: kernel by kernel
    runner = CodecRunner(codec)
    runner.warm_up()
    for batch in args.batch:
        codes = torch.randint(0, codec.codebook_size, (length, codec.num_codebooks), device="cuda")
        windows = [(codes, context)] * batch
        conditions = [torch.zeros(codec.condition_dim, device="cuda")] * batch if codec.condition_dim else None
        with torch.inference_mode():
            for _ in range(3):
                runner.decode_windows(windows, conditions)
                eager.decode_windows(windows, conditions)
            torch.cuda.synchronize()
            started = time.perf_counter()
            runner.decode_windows(windows, conditions)
            torch.cuda.synchronize()
            runner_ms = (time.perf_counter() - started) * 1e3
            with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
                eager.decode_windows(windows, conditions)
                torch.cuda.synchronize()
        kernels: dict[str, list[float]] = {}
        for event in prof.events():
            if event.device_type == torch.autograd.DeviceType.CUDA:
                entry = kernels.setdefault(event.name[:90], [0.0, 0])
                entry[0] += event.device_time_total / 1e3
                entry[1] += 1
        total = sum(ms for ms, _ in kernels.values())
        top = sorted(kernels.items(), key=lambda kv: -kv[1][0])[:args.top]
        print(json.dumps({"model": args.model, "compiled": args.compile, "batch": batch, "window": length, "runner_ms": round(runner_ms, 2),
                          "kernel_ms_total": round(total, 2), "kernels": sum(n for _, n in kernels.values()),
                          "top": [[name, round(ms, 2), n] for name, (ms, n) in top]}), flush=True)


if __name__ == "__main__":
    main()
