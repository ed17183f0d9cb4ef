"""LM decode microbenchmark: one frame (talker + 15-step predictor) eager vs CUDA graphs, per batch size.

    python3 -m clients.microbench.lm --model qwen3-tts-1.7b --batch-sizes 1 8 32 64

Random weights, every row sampling (temperature 0.9, top-k 50). Columns (ms):
  eager, graphs   a whole `decode` step as the engine sees it (host packing, noise draws, the
                  codes.cpu() copy), eagerly on the same padded buckets vs replaying the graphs
  talker, predictor  one replay of each graph alone, timed with CUDA events (GPU time)
  floor           bytes of weights a talker step reads (layers, final norm, codec head; not the
                  text table) / 4.3e12 B/s, the H200's measured copy bandwidth
Runs under MPS as is; the header echoes CUDA_MPS_ACTIVE_THREAD_PERCENTAGE.
"""
from __future__ import annotations

import argparse
import json
import os
import time

import torch

from backend_python.models.base import DecodeBatch, SamplingParams
from backend_python.models.qwen3_tts import Qwen3TTSLM, preset_config

BANDWIDTH_BYTES_PER_S = 4.3e12
SAMPLING = SamplingParams(temperature=0.9, top_k=50, top_p=1.0, repetition_penalty=1.05)
TEXT = "Get the trust fund to the bank early, and call me when you are back home tonight."


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen3-tts-1.7b")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 32, 64])
    parser.add_argument("--frames", type=int, default=20, help="timed graph frames per batch size")
    parser.add_argument("--eager-frames", type=int, default=3, help="timed eager frames per batch size")
    parser.add_argument("--replays", type=int, default=50, help="timed replays of each graph alone")
    parser.add_argument("--max-seq-len", type=int, default=1024)
    parser.add_argument("--json", default=None, help="also write the rows to this file")
    parser.add_argument("--profile", action="store_true", help="kernel counts and top kernels of each eager half")
    parser.add_argument("--no-compile", dest="compile", action="store_false",
                        help="leave the decode layers and sampling uncompiled (the graphs replay eager kernels)")
    return parser.parse_args(argv)


def talker_floor_ms(lm: Qwen3TTSLM) -> float:
    modules = (lm.talker.model.layers, lm.talker.model.norm, lm.talker.codec_head)
    weight_bytes = sum(p.numel() * p.element_size() for m in modules for p in m.parameters())
    return weight_bytes / BANDWIDTH_BYTES_PER_S * 1e3


def frame_ms(lm: Qwen3TTSLM, batch: DecodeBatch, num_frames: int, graphed: bool) -> float:
    """Wall time of a decode step, each followed by the engine's device-to-host copy."""
    lm.use_cuda_graphs = graphed
    lm.decode(batch)[0].cpu()  # warm-up
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(num_frames):
        lm.decode(batch)[0].cpu()
    return (time.perf_counter() - start) / num_frames * 1e3


def gpu_ms(run, repeats: int) -> float:
    run()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        run()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / repeats


def profile_halves(lm: Qwen3TTSLM, bucket: int) -> None:
    """Kernels launched by one eager run of each graph's function (what each graph replays)."""
    from torch.profiler import ProfilerActivity, profile

    graphs = lm.frame_graphs
    for name, run in (("predictor", graphs.run_predictor), ("talker", graphs.run_talker)):
        run(bucket, False)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            run(bucket, False)
            torch.cuda.synchronize()
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        busy_ms = sum(e.device_time_total for e in kernels) / 1e3
        print(f"## bucket {bucket} {name}: {len(kernels)} kernels, {busy_ms:.2f} ms busy")
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=14, max_name_column_width=80))


def bench_batch(lm: Qwen3TTSLM, size: int, args: argparse.Namespace, can_graph: bool) -> dict:
    generators = [torch.Generator(device="cuda").manual_seed(row) for row in range(size)]
    batch = DecodeBatch(slots=list(range(size)), sampling=[SAMPLING] * size, generators=generators,
                        ignore_eos=[True] * size)
    graphs = lm.frame_graphs
    bucket = graphs.bucket_for(size)
    row = {"batch": size, "bucket": bucket,
           "eager_ms": frame_ms(lm, batch, args.eager_frames, graphed=False),
           "talker_eager_ms": gpu_ms(lambda: graphs.run_talker(bucket, False), 3),
           "predictor_eager_ms": gpu_ms(lambda: graphs.run_predictor(bucket, False), 3)}
    if not can_graph:
        return {**row, "graphs_ms": float("nan"), "talker_ms": float("nan"), "predictor_ms": float("nan")}
    return {**row, "graphs_ms": frame_ms(lm, batch, args.frames, graphed=True),
            "talker_ms": gpu_ms(lambda: graphs.run_talker(bucket, True), args.replays),
            "predictor_ms": gpu_ms(lambda: graphs.run_predictor(bucket, True), args.replays)}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    print(f"# {torch.cuda.get_device_name()} torch {torch.__version__} model {args.model} bf16 | "
          f"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={os.environ.get('CUDA_MPS_ACTIVE_THREAD_PERCENTAGE', 'unset')}")
    lm = Qwen3TTSLM.from_config(preset_config(args.model), device="cuda", dtype=torch.bfloat16, seed=0)
    lm.use_torch_compile = args.compile
    num_slots = max(args.batch_sizes)
    start = time.perf_counter()
    try:
        lm.allocate_slots(num_slots, args.max_seq_len)
    except RuntimeError as exc:  # still measure the eager frame
        print(f"# graph capture failed, eager only: {exc}")
        lm.use_cuda_graphs = False
        lm.allocate_slots(num_slots, args.max_seq_len)
    can_graph = lm.use_cuda_graphs
    torch.cuda.synchronize()
    print(f"# torch.compile {'on' if args.compile else 'off'}; "
          f"allocate_slots({num_slots}, {args.max_seq_len}) with graph capture of buckets "
          f"{lm.frame_graphs.buckets}: {time.perf_counter() - start:.2f} s; "
          f"varlen flash attention: {lm._memory.kv.is_varlen}")
    prompt = lm.encode_prompt(TEXT, None)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for slot in range(num_slots):
        lm.prefill(slot, prompt)
    torch.cuda.synchronize()
    print(f"# prefill of {prompt.num_tokens} tokens: {(time.perf_counter() - start) / num_slots * 1e3:.2f} ms each")
    floor = talker_floor_ms(lm)
    print(f"# prompt {prompt.num_tokens} tokens; talker weights read per step {floor * BANDWIDTH_BYTES_PER_S / 1e12:.2f}"
          f" GB -> floor {floor:.3f} ms")
    header = ("batch", "bucket", "eager", "graphs", "talker", "predictor", "talker_eager", "predictor_eager",
              "floor", "talker/floor")
    print(" | ".join(header))
    rows = []
    for size in args.batch_sizes:
        try:
            row = {**bench_batch(lm, size, args, can_graph), "floor_ms": floor}
        except RuntimeError as exc:  # report and go on with the other sizes
            print(f"{size} | failed: {exc}", flush=True)
            continue
        rows.append(row)
        if args.profile:
            try:
                profile_halves(lm, row["bucket"])
            except (RuntimeError, AttributeError) as exc:
                print(f"# profiling failed: {exc}")
        print(f"{size} | {row['bucket']} | {row['eager_ms']:.2f} | {row['graphs_ms']:.2f} | {row['talker_ms']:.3f} | "
              f"{row['predictor_ms']:.2f} | {row['talker_eager_ms']:.2f} | {row['predictor_eager_ms']:.2f} | "
              f"{floor:.3f} | {row['talker_ms'] / floor:.2f}", flush=True)
    pct = int(os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "100"))
    for row in rows:
        print(json.dumps({"bench": "lm", "model": args.model, "mps_pct": pct,
                          **{k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}}), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    with torch.no_grad():
        main()
