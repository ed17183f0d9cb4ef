"""Codec lane latency per batch size: one window (left context + new frames + lookahead) per request.

    CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25 python3 -m server.microbench.codec --model qwen3-tts-1.7b

Reads the MPS percentage from the environment (set it, under a running MPS daemon, to see the codec
lane's partition) and prints one JSON line per batch size (ms, medians):
  eager       `decode_windows` as the codec runs it itself: kernel by kernel, or through the graphs a codec
              captures of its own at warm-up (`Codec.capture_graphs`: CosyVoice 3's flow and HiFT, FlashTTS's
              windows)
  graphs      the same windows through the lane's `CodecRunner` (CUDA graphs per bucket)
  host_copy   what the Triton glue adds around a call: each window's codes numpy -> device and each
              window's audio device -> numpy (the round trip DLPack would avoid)
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np
import torch

from backend_python.engine.codec_runner import CodecRunner
from backend_python.models import registry
from backend_python.stub_common.params import LaneSettings


def median_ms(run, repeats: int) -> float:
    times = []
    for _ in range(repeats + 2):
        torch.cuda.synchronize()
        started = time.perf_counter()
        run()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - started) * 1e3)
    return statistics.median(times[2:])


def host_round_trip(codes: np.ndarray, audio: list[torch.Tensor], device: torch.device) -> None:
    """The codec glue's copies: codes in (one per window) and audio out (one per window)."""
    for _ in audio:
        torch.from_numpy(codes.astype(np.int64)).to(device)
    for samples in audio:
        samples.float().cpu().numpy()


def bench_batch(runner: CodecRunner, batch_size: int, frames: int, context: int, repeats: int,
                lookahead: int = 0) -> dict:
    codec = runner.codec
    codes = torch.randint(0, codec.codebook_size, (context + frames + lookahead, codec.num_codebooks),
                          device=codec.device)
    windows = [(codes, context)] * batch_size
    # a codec with a condition gets one per window (a speaker embedding), as the lane passes them
    conditions = [torch.zeros(codec.condition_dim, device=codec.device)] * batch_size if codec.condition_dim else None
    with torch.inference_mode():
        eager = median_ms(lambda: codec.decode_windows(windows, conditions), repeats)
        graphs = (median_ms(lambda: runner.decode_windows(windows, conditions), repeats)
                  if runner.graphs and conditions is None else float("nan"))
        audio = runner.decode_windows(windows, conditions)
        host_codes = codes.cpu().numpy().astype(np.int32)
        copies = median_ms(lambda: host_round_trip(host_codes, audio, codec.device), repeats)
    return {"eager_ms": round(eager, 2), "graphs_ms": round(graphs, 2), "host_copy_ms": round(copies, 3)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen3-tts-1.7b")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 4, 8, 16, 32])
    parser.add_argument("--frames", type=int, default=10, help="new frames per window (10 = 0.8 s)")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--no-graphs", action="store_true")
    parser.add_argument("--codec-compile", action=argparse.BooleanOptionalAction, default=LaneSettings.codec_compile,
                        help="a flow-matching codec's DiT blocks compiled before its graphs are captured, as the "
                             "codec lanes do by default (`voxlane serve --codec-compile`)")
    args = parser.parse_args(argv)
    spec = registry.resolve(args.model)
    codec = registry.load_codec(spec, device="cuda", dtype=args.dtype)
    windowing = registry.codec_windowing(spec)
    context, lookahead = windowing.left_context_frames, windowing.lookahead_frames
    codec.use_torch_compile = args.codec_compile  # read at warm-up (Codec.capture_graphs), as in the lanes
    runner = CodecRunner(codec, use_cuda_graphs=not args.no_graphs)
    started = time.perf_counter()
    runner.warm_up()
    capture_s = time.perf_counter() - started
    pct = int(os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "100"))
    for batch_size in args.batch_sizes:
        row = bench_batch(runner, batch_size, args.frames, context, args.repeats, lookahead)
        print(json.dumps({"bench": "codec", "model": args.model, "mps_pct": pct, "batch": batch_size,
                          "frames": args.frames, "context": context, "lookahead": lookahead,
                          "capture_s": round(capture_s, 1), **row}),
              flush=True)


if __name__ == "__main__":
    main()
