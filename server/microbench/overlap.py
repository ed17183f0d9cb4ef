"""LM and codec throughput side by side: one process time-sharing the GPU, or two processes on MPS shares.

    python3 -m server.microbench.overlap --role timeshare --model qwen3-tts-1.7b
    CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=75 python3 -m server.microbench.overlap --role lm --barrier DIR &
    CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25 python3 -m server.microbench.overlap --role codec --barrier DIR

`lm` decodes frames for `--lm-batch` streams back to back; `codec` decodes windows of `--chunk-frames`
new frames for `--codec-batch` streams back to back; `timeshare` does both in one loop, the way a
serialised server does (every `--chunk-frames` LM steps, the chunks just cut are decoded). With
`--barrier DIR` a process loads and warms up, writes DIR/<role>.ready and waits for DIR/go, so two
processes measure the same seconds. Prints one JSON line: LM frames/s (audio frames produced per
second, all streams) and codec frames/s (audio frames decoded per second).
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

from backend_python.engine.codec_runner import CodecRunner
from backend_python.models import registry
from backend_python.models.base import DecodeBatch, SamplingParams

TEXT = "Get the trust fund to the bank early, and call me when you are back home tonight."
SAMPLING = SamplingParams(temperature=0.9, top_k=50)


class LMLoop:
    def __init__(self, spec, batch_size: int, dtype: str) -> None:
        self.lm = registry.load_lm(spec, device="cuda", dtype=dtype)
        self.lm.allocate_slots(batch_size, 2048)
        prompt = self.lm.encode_prompt(TEXT, None)
        for slot in range(batch_size):
            self.lm.prefill(slot, prompt)
        generators = [torch.Generator(device="cuda").manual_seed(slot) for slot in range(batch_size)]
        self.batch = DecodeBatch(slots=list(range(batch_size)), sampling=[SAMPLING] * batch_size,
                                 generators=generators, ignore_eos=[True] * batch_size)

    def step(self) -> None:
        self.lm.decode(self.batch)[0].cpu()  # the engine's one device-to-host copy per step


class CodecLoop:
    def __init__(self, spec, batch_size: int, chunk_frames: int, dtype: str) -> None:
        codec = registry.load_codec(spec, device="cuda", dtype=dtype)
        self.runner = CodecRunner(codec)
        self.runner.warm_up()
        windowing = registry.codec_windowing(spec)
        context = windowing.left_context_frames
        codes = torch.randint(0, codec.codebook_size, (context + chunk_frames + windowing.lookahead_frames,
                                                       codec.num_codebooks), device="cuda")
        self.windows = [(codes, context)] * batch_size
        self.conditions = ([torch.zeros(codec.condition_dim, device="cuda")] * batch_size if codec.condition_dim
                           else None)

    def step(self) -> None:
        for audio in self.runner.decode_windows(self.windows, self.conditions):
            audio.cpu()


def wait_for_go(barrier: Path | None, role: str) -> None:
    if barrier is None:
        return
    (barrier / f"{role}.ready").touch()
    deadline = time.monotonic() + 600
    while not (barrier / "go").exists():
        if time.monotonic() > deadline:
            raise TimeoutError("no go signal")
        time.sleep(0.01)


def run_for(seconds: float, step) -> tuple[int, float]:
    steps, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        step()
        steps += 1
    return steps, time.perf_counter() - started


def measure(args: argparse.Namespace) -> dict:
    spec = registry.resolve(args.model)
    lm = LMLoop(spec, args.lm_batch, args.dtype) if args.role in ("lm", "timeshare") else None
    codec = CodecLoop(spec, args.codec_batch, args.chunk_frames, args.dtype) if args.role != "lm" else None
    for loop in (lm, codec):  # warm-up outside the timed window
        if loop is not None:
            loop.step()
    wait_for_go(args.barrier, args.role)
    if args.role == "lm":
        steps, wall = run_for(args.seconds, lm.step)
        return {"lm_frames_per_s": steps * args.lm_batch / wall, "lm_step_ms": wall / steps * 1e3}
    if args.role == "codec":
        steps, wall = run_for(args.seconds, codec.step)
        return {"codec_frames_per_s": steps * args.codec_batch * args.chunk_frames / wall,
                "codec_call_ms": wall / steps * 1e3}
    return timeshare(lm, codec, args)


def timeshare(lm: LMLoop, codec: CodecLoop, args: argparse.Namespace) -> dict:
    """Every chunk_frames LM steps, decode the lm_batch chunks just cut, codec_batch at a time."""
    calls_per_chunk_round = -(-args.lm_batch // args.codec_batch)

    def round_trip() -> None:
        for _ in range(args.chunk_frames):
            lm.step()
        for _ in range(calls_per_chunk_round):
            codec.step()
    rounds, wall = run_for(args.seconds, round_trip)
    frames = rounds * args.chunk_frames * args.lm_batch
    return {"lm_frames_per_s": frames / wall, "codec_frames_per_s": frames / wall,
            "round_ms": wall / rounds * 1e3}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--role", choices=("lm", "codec", "timeshare"), required=True)
    parser.add_argument("--model", default="qwen3-tts-1.7b")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--lm-batch", type=int, default=32)
    parser.add_argument("--codec-batch", type=int, default=16)
    parser.add_argument("--chunk-frames", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--barrier", type=Path, default=None)
    args = parser.parse_args(argv)
    with torch.inference_mode():
        row = measure(args)
    pct = int(os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "100"))
    print(json.dumps({"bench": "overlap", "role": args.role, "mps_pct": pct, "lm_batch": args.lm_batch,
                      "codec_batch": args.codec_batch, "chunk_frames": args.chunk_frames,
                      **{k: round(v, 2) for k, v in row.items()}}), flush=True)


if __name__ == "__main__":
    main()
