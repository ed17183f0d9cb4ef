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

With `--streaming`, the call the background lane makes under load instead: each of the batch's streams keeps
its decoder state on the lane and sends chunks of `--frames` new frames (`CodecRunner.decode_chunks`, through
the streaming graphs of each (batch, frames) bucket on CUDA). One JSON line per batch size and chunk length:
  ms          a continued call's median wall time (a stream's first chunk, rebuilt from a fresh state, is not
              timed); decoded_per_new 1.0 says every timed call continued its streams' states
  bucket      the graph bucket the call replays ([rows, frames]; null: no bucket holds it, it runs eagerly)
  padding     the bucket's rows x frames over the call's: work the replay spends on padding
  floor_ms    the bytes a call must read at least (the decoder's weights once, each stream's state read and
              written) at `--bandwidth-tb-s`; activations are not counted, so this is a lower bound
  kernels     with `--profile`: the call's kernels, GPU time per kernel class and the longest ones (as the LM
              frame's profile classes them; through a graph's replay where the trace sees into it)
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np
import torch

from backend_python.engine.codec_runner import CodecRunner, FrameCounts, StreamChunk
from backend_python.engine.codec_states import CodecStateLimits
from backend_python.models import registry
from backend_python.stub_common.params import LaneSettings
from server.microbench.frame_floor import parameter_bytes


def synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def median_ms(run, repeats: int) -> float:
    times = []
    for _ in range(repeats + 2):
        synchronize()
        started = time.perf_counter()
        run()
        synchronize()
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


class Streams:
    """`batch_size` streams on a stateful runner, each sent chunks of `frames` new frames in order."""

    def __init__(self, runner: CodecRunner, batch_size: int, frames: int, context: int, seed: int = 0) -> None:
        self.runner, self.frames, self.context = runner, frames, context
        self.next_frame = 0
        codec = runner.codec
        generator = torch.Generator().manual_seed(seed)
        self.codes = torch.randint(0, codec.codebook_size, (context + frames, codec.num_codebooks),
                                   generator=generator).to(codec.device)
        self.names = [f"bench-{batch_size}x{frames}-{i}" for i in range(batch_size)]

    def call(self) -> list[torch.Tensor]:
        """One lane call: every stream's next chunk (the first rebuilds its state from a fresh one)."""
        start, context = self.next_frame, min(self.context, self.next_frame)
        codes = self.codes[self.context - context:]
        chunks = [StreamChunk(name, codes, context, start) for name in self.names]
        self.next_frame += self.frames
        return self.runner.decode_chunks(chunks)

    def end(self) -> None:
        for name in self.names:
            self.runner.release_stream(name)


def bench_streaming(runner: CodecRunner, batch_size: int, frames: int, context: int, repeats: int,
                    bandwidth_bytes_s: float, profile_top: int = 0) -> dict:
    codec, graphs = runner.codec, runner.stream_graphs
    streams = Streams(runner, batch_size, frames, context)
    with torch.inference_mode():
        streams.call()  # the first chunk: a state rebuilt from its window
        runner.frames = FrameCounts()
        ms = median_ms(streams.call, repeats)
        # 1.0 where every timed call continued its streams' states (decoded only their new frames)
        row = {"ms": round(ms, 3), "decoded_per_new": round(runner.frames.decoded_per_new, 3)}
        bucket = graphs.bucket_for(batch_size, frames) if graphs is not None else None
        row["bucket"] = list(bucket) if bucket else None
        row["padding"] = round(bucket[0] * bucket[1] / (batch_size * frames), 2) if bucket else None
        # the floor: the weights read once, each stream's state read and written
        weights, state = parameter_bytes(codec), codec.new_stream_state().num_bytes
        row.update(weights_mb=round(weights / 1e6, 1), state_kb_per_stream=round(state / 1e3, 1),
                   floor_ms=round((weights + 2 * batch_size * state) / bandwidth_bytes_s * 1e3, 4))
        if profile_top:
            from server.microbench.lm_profile import trace
            from server.microbench.kernel_classes import summarize
            row["kernels"] = summarize(trace(streams.call), profile_top).to_dict()
    streams.end()
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen3-tts-1.7b")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 4, 8, 16, 32])
    parser.add_argument("--frames", type=int, default=10, help="new frames per window (10 = 0.8 s)")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--no-graphs", action="store_true")
    parser.add_argument("--cudnn-benchmark", action=argparse.BooleanOptionalAction, default=True,
                        help="cuDNN times each convolution shape's algorithms once (at warm-up), as every lane that "
                             "decodes audio runs (`LaneSettings.cudnn_benchmark`); off: cuDNN's heuristics choose")
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda where there is one)")
    parser.add_argument("--streaming", action="store_true",
                        help="the background lane's call under load: continued chunks from each stream's state")
    parser.add_argument("--chunk-frames", type=int, nargs="+", default=None,
                        help="with --streaming: new frames per chunk, one run each (default: --frames)")
    parser.add_argument("--profile", action="store_true", help="with --streaming: the call's kernels by class")
    parser.add_argument("--top", type=int, default=8, help="longest kernels listed with --profile")
    parser.add_argument("--bandwidth-tb-s", type=float, default=4.3,
                        help="the GPU's memory bandwidth for the floor (4.3: an H200's copy bandwidth)")
    parser.add_argument("--codec-compile", action=argparse.BooleanOptionalAction, default=LaneSettings.codec_compile,
                        help="a flow-matching codec's DiT blocks compiled before its graphs are captured, as the "
                             "codec lanes do by default (`voxlane serve --codec-compile`)")
    args = parser.parse_args(argv)
    spec = registry.resolve(args.model)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    codec = registry.load_codec(spec, device=device, dtype=args.dtype)
    windowing = registry.codec_windowing(spec)
    context, lookahead = windowing.left_context_frames, windowing.lookahead_frames
    codec.use_torch_compile = args.codec_compile  # read at warm-up (Codec.capture_graphs), as in the lanes
    torch.backends.cudnn.benchmark = args.cudnn_benchmark  # before the runner: a windowed one without graphs turns it off
    states = CodecStateLimits() if args.streaming else None
    runner = CodecRunner(codec, use_cuda_graphs=not args.no_graphs, stream_states=states)
    if args.profile and (device != "cuda" or not args.streaming):
        parser.error("--profile traces a streaming call's CUDA kernels: it needs --streaming on cuda")
    if args.streaming and runner.states is None:
        parser.error(f"{args.model}'s codec keeps no streaming state: its lanes decode windows (drop --streaming)")
    started = time.perf_counter()
    runner.warm_up()
    capture_s = time.perf_counter() - started
    pct = int(os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "100"))
    if args.streaming:
        for frames in args.chunk_frames or [args.frames]:
            for batch_size in args.batch_sizes:
                row = bench_streaming(runner, batch_size, frames, context, args.repeats, args.bandwidth_tb_s * 1e12,
                                      args.top if args.profile else 0)
                print(json.dumps({"bench": "codec_streaming", "model": args.model, "device": device, "mps_pct": pct,
                                  "batch": batch_size, "frames": frames, "capture_s": round(capture_s, 1), **row}),
                      flush=True)
        return
    for batch_size in args.batch_sizes:
        row = bench_batch(runner, batch_size, args.frames, context, args.repeats, lookahead)
        print(json.dumps({"bench": "codec", "model": args.model, "mps_pct": pct, "batch": batch_size,
                          "frames": args.frames, "context": context, "lookahead": lookahead,
                          "capture_s": round(capture_s, 1), **row}),
              flush=True)


if __name__ == "__main__":
    main()
