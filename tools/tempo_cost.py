"""What `speed` costs the router, side by side with the resampling every `sample_rate` request already pays.

    python -m tools.tempo_cost            # 20 s of a voiced signal, in the server's chunk sizes (2, 10, 20, 40 frames)

For each speed: CPU ms per second of audio through FFmpeg's atempo (audio/tempo.py), as a ratio to soxr's HQ
24 -> 16 kHz resampler on the same chunks, and how much audio the first chunk (2 frames, 160 ms) gives out at
once (the rest of it comes with the next chunk: the filter's window).
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from audio.encoders import Resampler
from audio.tempo import TempoStream

RATE, FRAME = 24000, 1920
CHUNK_FRAMES = (2, 10, 20, 40, 40, 40)  # the default plan: a 2-frame first chunk, then growing


def voiced(seconds: float, seed: int = 0) -> np.ndarray:
    """A speech-like test signal: a gliding harmonic tone with a syllable envelope."""
    t = np.arange(int(seconds * RATE)) / RATE
    f0 = 140 + 30 * np.sin(2 * np.pi * 0.7 * t)
    phase = 2 * np.pi * np.cumsum(f0) / RATE
    tone = sum(np.sin(k * phase) / k for k in range(1, 8))
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 4 * t) ** 2
    return (0.2 * tone * envelope + 0.01 * np.random.default_rng(seed).standard_normal(t.size)).astype(np.float32)


def chunks(audio: np.ndarray) -> list[np.ndarray]:
    out, start, plan = [], 0, list(CHUNK_FRAMES)
    while start < audio.size:
        size = (plan.pop(0) if plan else CHUNK_FRAMES[-1]) * FRAME
        out.append(audio[start:start + size])
        start += size
    return out


def run(process, pieces: list[np.ndarray]) -> tuple[float, int, int]:
    """(CPU seconds, samples out after the first piece, samples out in all)."""
    started = time.process_time()
    first = total = 0
    for i, piece in enumerate(pieces):
        n = process(piece, i == len(pieces) - 1).size
        first = n if i == 0 else first
        total += n
    return time.process_time() - started, first, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    pieces = chunks(voiced(args.seconds))

    def best(make) -> tuple[float, int, int]:
        runs = [run(make().process, pieces) for _ in range(args.repeats)]
        return min(r[0] for r in runs), runs[0][1], runs[0][2]

    soxr_s, _, _ = best(lambda: Resampler(RATE, 16000))
    print(f"soxr HQ 24->16 kHz: {soxr_s / args.seconds * 1e3:.3f} ms CPU per audio second")
    print("| speed | atempo ms CPU / audio s | × soxr | first chunk out (of 160 ms in) | length out / expected |")
    print("| --- | --- | --- | --- | --- |")
    for speed in (0.25, 0.5, 0.75, 1.25, 1.5, 2.0, 4.0):
        cpu_s, first, total = best(lambda: TempoStream(RATE, speed))
        expected = args.seconds * RATE / speed
        print(f"| {speed:g} | {cpu_s / args.seconds * 1e3:.3f} | {cpu_s / soxr_s:.2f} | "
              f"{first / RATE * 1e3:.0f} ms (of {160 / speed:.0f} ms due) | {total / expected:.4f} |")


if __name__ == "__main__":
    main()
