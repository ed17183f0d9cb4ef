"""A model's LM and codec on their own: load, prefill one prompt, decode a few steps, decode one chunk window.

    python -m tools.family_check --model cosyvoice3-0.5b [--device cuda]

Prints one JSON line: load seconds, the decode step's and the codec window's wall time (ms, after a warm-up;
`codec_ms` eager, `runner_ms` through the lane's runner with its graphs, on CUDA), and the shapes, so a device
run learns at once whether a family runs there before servers start.
"""
from __future__ import annotations

import argparse
import json
import time

import torch

from backend_python.engine.codec_runner import CodecRunner, StreamChunk, decode_windowed
from backend_python.models import registry
from backend_python.models.base import DecodeBatch, SamplingParams
from backend_python.models.delay_pattern import FrameAssembler

TEXT = "Get the trust fund to the bank early, and call me when you are back home tonight."


def timed_ms(run, device: str) -> float:
    if device == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    run()
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - started) * 1e3


def check(model: str, device: str, dtype: str, steps: int) -> dict:
    started = time.perf_counter()
    spec = registry.resolve(model)
    lm = registry.load_lm(spec, device=device, dtype=dtype)
    codec = registry.load_codec(spec, device=device, dtype=dtype)
    load_s = time.perf_counter() - started
    lm.allocate_slots(2, 1024)
    prompt = lm.encode_prompt(TEXT, None)
    prefill_ms = timed_ms(lambda: lm.prefill(0, prompt), device)
    batch = DecodeBatch(slots=[0], sampling=[SamplingParams()], generators=[torch.Generator(device=device)],
                        ignore_eos=[True])
    frames = []
    lm.decode(batch)  # warm-up (graph capture, compile)
    # a delayed family runs its max delay more steps: its first frame completes that many steps later
    step_ms = [timed_ms(lambda: frames.append(lm.decode(batch)[0].cpu()), device)
               for _ in range(steps + lm.num_delay_steps)]
    codes = torch.cat(complete_frames(lm, frames, codec.num_codebooks)).to(device)
    windowing = registry.codec_windowing(spec)
    condition = lm.codec_condition(prompt)
    conditions = None if condition is None else [condition.to(device)]
    window = [(codes, min(windowing.left_context_frames, codes.shape[0] - 1))]
    codec.decode_windows(window, conditions)  # warm-up
    audio = []
    codec_ms = timed_ms(lambda: audio.extend(codec.decode_windows(window, conditions)), device)
    runner_ms = None
    if device == "cuda":  # the lane's runner: graphs where the codec has them (Codec.capture_graphs), eager else
        runner = CodecRunner(codec)
        runner.warm_up()
        chunk = [StreamChunk("check", window[0][0], window[0][1], window[0][1], condition=None if conditions is None
                             else conditions[0])]
        decode_windowed(runner, chunk)  # warm-up
        runner_ms = timed_ms(lambda: decode_windowed(runner, chunk), device)
    return {"model": model, "device": device, "load_s": round(load_s, 1), "prefill_ms": round(prefill_ms, 1),
            "step_ms_median": round(sorted(step_ms)[len(step_ms) // 2], 2), "frames_per_step": lm.frames_per_step,
            "codec_window_frames": codes.shape[0], "codec_ms": round(codec_ms, 1),
            "runner_ms": None if runner_ms is None else round(runner_ms, 1),
            "audio_samples": int(audio[0].shape[0]), "audio_peak": round(float(audio[0].abs().max()), 3),
            "windowing": [windowing.left_context_frames, windowing.lookahead_frames, windowing.overlap_frames]}


def complete_frames(lm, steps: list[torch.Tensor], num_codebooks: int) -> list[torch.Tensor]:
    """Each step's codes as frames [n, K]; a delayed family's rows assembled into the frames they complete."""
    if lm.delay_pattern is None:
        return [f.reshape(-1, num_codebooks) for f in steps]
    assembler = FrameAssembler(lm.delay_pattern)
    return [frame[None] for row in steps for frame in assembler.push(row.reshape(-1), False).frames]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--device", default="cuda", choices=("cpu", "cuda"))
    parser.add_argument("--dtype", default=None, help="default: bfloat16 on CUDA, float32 on the CPU")
    parser.add_argument("--steps", type=int, default=12, help="decode steps (a delayed family: at least its largest delay + 2)")
    args = parser.parse_args(argv)
    dtype = args.dtype or ("bfloat16" if args.device == "cuda" else "float32")
    print(json.dumps(check(args.model, args.device, dtype, args.steps)), flush=True)


if __name__ == "__main__":
    main()
