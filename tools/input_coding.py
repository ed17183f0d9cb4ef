"""What an audio-in stream's input chunks cost the voice encoder lane, side by side in one run: a dynamic batch of
one steady-state window per stream (4 new frames and 12 of context: 1.28 s at 24 kHz) encoded as references were
(`encode(..., x_vector_only=False)`: the speaker network and the codec encoder, one window at a time) against
`encode_codes` (the codec encoder alone, the windows of one length as one batch), with the share of codes the two
agree on (1.0 in float32 on the CPU, where the unit tests hold them equal; a low-precision batch may round apart).

    python -m tools.input_coding                                     # tse-tiny on the CPU
    python -m tools.input_coding --preset tse-1.7b --device cuda --dtype bfloat16 --streams 1 8 32
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from backend_python.vox_ensemble.audio_sessions import AudioInLimits

WINDOW_FRAMES = AudioInLimits().chunk_frames + AudioInLimits().context_frames  # a chunk and its left context
SAMPLES_PER_FRAME = 1920  # 24 kHz, 12.5 Hz frames


def best_ms(run, repeats: int, sync) -> float:
    """The fastest of `repeats` timed calls of `run` (after one untimed), in ms."""
    run()
    sync()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        sync()
        times.append((time.perf_counter() - started) * 1e3)
    return min(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="tse-tiny")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    import torch

    from backend_python.models import registry
    if args.device == "cpu":
        torch.set_num_threads(1)  # as the lane's stub runs
    encoder = registry.load_voice_encoder(registry.resolve(args.preset), device=args.device, dtype=args.dtype)
    if encoder is None:
        parser.error(f"{args.preset} has no voice encoder")
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    rng = np.random.default_rng(0)
    print(f"{args.preset} on {args.device} ({args.dtype}): one {WINDOW_FRAMES}-frame window per stream")
    print(f"{'streams':>8} {'as references ms':>17} {'encode_codes ms':>16} {'ratio':>6} {'codes agree':>12}")
    for num in args.streams:
        windows = [torch.from_numpy(rng.uniform(-0.5, 0.5, WINDOW_FRAMES * SAMPLES_PER_FRAME).astype(np.float32))
                   .to(args.device) for _ in range(num)]
        with torch.inference_mode():
            before = torch.stack([r["ref_codes"] for r in encoder.encode(windows, [False] * num)])
            agree = (before == torch.stack(encoder.encode_codes(windows))).float().mean().item()
            old = best_ms(lambda: encoder.encode(windows, [False] * num), args.repeats, sync)
            new = best_ms(lambda: encoder.encode_codes(windows), args.repeats, sync)
        print(f"{num:>8} {old:>17.2f} {new:>16.2f} {old / new:>6.2f} {agree:>12.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
