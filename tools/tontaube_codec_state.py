"""What TontaubeV1's codec lane pays for a late chunk: today's window (up to 222 frames of left context through
DualCodec and VibeVoice) against the stream's kept VibeVoice state (a short window, the tails carried over).

    python3 -m tools.tontaube_codec_state --size tiny --chunk 10 --repeats 15
    python3 -m tools.tontaube_codec_state --size full --chunk 12 --repeats 3

Random weights, float32, on the CPU. The stream's chunks are cut as the engine cuts them,
the chunks before `--chunk` decoded through the lane's runner to build the state, then the chunk is decoded both
ways: FLOPs (torch.utils.flop_counter), wall time (min and median of `--repeats`) and the largest difference
between the two answers. One JSON line.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from torch.utils.flop_counter import FlopCounterMode

from backend_python.engine.codec_runner import CodecRunner, decode_windowed
from backend_python.engine.codec_states import CodecStateLimits
from backend_python.models.tontaube.codec import TontaubeCodec
from backend_python.models.tontaube.dualcodec import DualCodecConfig
from backend_python.models.tontaube.tiny import codec_config
from backend_python.models.tontaube.vibevoice import full_config, tiny_config
from tests.unit.test_tontaube_codec import engine_chunks, random_codes


def build(size: str) -> TontaubeCodec:
    return (TontaubeCodec.random(codec_config(), seed=0, vibevoice_config=tiny_config()) if size == "tiny" else
            TontaubeCodec.random(DualCodecConfig(), seed=0, vibevoice_config=full_config()))


def timed(run, repeats: int) -> tuple[float, float]:
    """(min, median) ms of `repeats` runs."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append((time.perf_counter() - started) * 1e3)
    return min(times), statistics.median(times)


def gflop(run) -> float:
    with FlopCounterMode(display=False) as counter:
        run()
    return counter.get_total_flops() / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=("tiny", "full"), default="tiny")
    parser.add_argument("--chunk", type=int, default=10, help="the chunk to time (1-based; the 12th is the first "
                                                              "with the full 222 frames of context)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_flush_denormal(True)
    codec = build(args.size)
    codes = random_codes(5 + 10 + 20 + 25 * (args.chunk - 2), seed=5)
    chunks = engine_chunks("s", codes, codec.shape.window)
    chunk = chunks[args.chunk - 1]
    runner = CodecRunner(codec, stream_states=CodecStateLimits())
    with torch.inference_mode():
        for earlier in chunks[:args.chunk - 1]:
            runner.decode_chunks([earlier])
        state = runner.states.take("s", chunk.start_frame)
        window = runner._stream_window(chunk, True)
        today = lambda: decode_windowed(codec, [chunk])  # noqa: E731
        kept = lambda: codec.decode_stream_windows([state], [window])  # noqa: E731
        difference = (today()[0] - kept()[0][0]).abs().max().item()
        row = {"size": args.size, "chunk": args.chunk,
               "context_frames": chunk.context_frames, "window_frames": int(chunk.codes.shape[0]),
               "state_window_frames": int(window.codes.shape[0]), "state_bytes": state.num_bytes,
               "gflop": {"window": round(gflop(today), 3), "state": round(gflop(kept), 3)},
               "max_abs_difference": difference}
        for name, run in (("window", today), ("state", kept)):
            low, median = timed(run, args.repeats)
            row[f"{name}_ms"] = {"min": round(low, 2), "median": round(median, 2)}
    row["ratio_median"] = round(row["window_ms"]["median"] / row["state_ms"]["median"], 2)
    print(json.dumps(row))


if __name__ == "__main__":
    main()
