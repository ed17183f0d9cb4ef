"""LM decode microbenchmark: one frame (talker + 15-step predictor) eager vs CUDA graphs, per batch size.

    python3 -m server.microbench.lm --model qwen3-tts-1.7b --batch-sizes 1 8 32 64
    python3 -m server.microbench.lm --batch-sizes 1 32 128 --context 256 --profile --json lm.json
    python3 -m server.microbench.lm --model qwen3-tts-tiny --device cpu --batch-sizes 1 4   # the CLI path, no GPU

Random weights, every row sampling (temperature 0.9, top-k 50). Columns (ms):
  eager, graphs   a whole `decode` step as the engine sees it (host packing, noise draws, the
                  codes.cpu() copy), eagerly on the same padded buckets vs replaying the graphs
  talker, predictor  one replay of each graph alone, timed with CUDA events (GPU time)
  floor           bytes of weights a talker step reads (layers, final norm, codec head; not the
                  text table) / 4.3e12 B/s, the H200's measured copy bandwidth
  context         talker keys a row attends over in the batch's first measured frame (mean over its rows)
  frame_floor     bytes the whole frame reads at that context / 4.3e12 B/s: talker and predictor weights (the
                  predictor's once per step), KV, embedding rows, noise (frame_floor.py; the JSON also holds
                  the bound with the predictor's weights read once a frame)
--context N first decodes every slot until its rows attend over N keys. --profile adds, per batch, the
kernels per frame and their GPU time per class (lm_profile.py, kernel_classes.py) and each half's longest
kernels; CUDA only. On a CPU (a tiny preset) the GPU columns read '-' and the profile is skipped, saying so.
Runs under MPS as is; the header echoes CUDA_MPS_ACTIVE_THREAD_PERCENTAGE.
"""
from __future__ import annotations

import argparse
import json
import os
import time

import torch

from backend_python.engine.config import EngineConfig
from backend_python.models.base import DecodeBatch, SamplingParams
from backend_python.models.graphs.buffers import batch_buckets
from backend_python.models.qwen3_tts import Qwen3TTSLM, preset_config
from backend_python.stub_common.params import LaneSettings

from server.microbench.frame_floor import BANDWIDTH_BYTES_PER_S, frame_bytes, floor_report
from server.microbench.lm_profile import format_profile, profile_bucket

SAMPLING = SamplingParams(temperature=0.9, top_k=50, top_p=1.0, repetition_penalty=1.05)
TEXT = "Get the trust fund to the bank early, and call me when you are back home tonight."
NAN = float("nan")
NUM_TRACED_FRAMES = 2  # decode steps one profile runs per batch (a warm one, the traced one)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen3-tts-1.7b")
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda where there is one)")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 32, 64])
    parser.add_argument("--frames", type=int, default=20, help="timed graph frames per batch size")
    parser.add_argument("--eager-frames", type=int, default=3, help="timed eager frames per batch size")
    parser.add_argument("--replays", type=int, default=50, help="timed replays of each graph alone")
    parser.add_argument("--max-seq-len", type=int, default=1024)
    parser.add_argument("--context", type=int, default=None,
                        help="decode every slot first until its rows attend over this many talker keys")
    parser.add_argument("--json", default=None, help="also write the rows (with the profile) to this file")
    parser.add_argument("--profile", action="store_true",
                        help="kernels per frame, GPU time per kernel class, each half's longest kernels (CUDA)")
    parser.add_argument("--top", type=int, default=15, help="longest kernels listed per half with --profile")
    parser.add_argument("--no-compile", dest="compile", action="store_false",
                        help="leave the decode layers and sampling uncompiled (the graphs replay eager kernels)")
    parser.add_argument("--no-fused-predictor", dest="fused_predictor", action="store_false",
                        help="the code predictor's attention on PyTorch's kernels, not the one Triton kernel per layer")
    parser.add_argument("--fp8-weights", action="store_true",
                        help="the fused frame's projections in float8 (kernels/fused_linear.py Fp8Weight)")
    parser.add_argument("--fused-frame", action=argparse.BooleanOptionalAction, default=LaneSettings().fused_frame,
                        help="the frame on the fused Triton kernels (kernels/fused_linear.py, kernels/sampler.py), or "
                             "the compiled PyTorch frame (default: the lane's)")
    args = parser.parse_args(argv)
    if min(args.batch_sizes) < 1 or (args.context is not None and args.context < 1):
        parser.error("batch sizes and --context must be >= 1")
    return args


def pick_device(name: str | None) -> torch.device:
    if name is None:
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cpu":
        print("# no CUDA: eager frames on the CPU only; graphs, GPU times and the kernel profile are skipped")
    return torch.device(name)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def frames_per_slot(args: argparse.Namespace) -> int:
    """Decode steps slot 0 takes after the advance (it is a row of every batch size): the table's frames,
    their warm-ups and the profile's."""
    per_size = args.eager_frames + 1 + args.frames + 1 + (NUM_TRACED_FRAMES if args.profile else 0)
    return len(args.batch_sizes) * per_size


def bucket_notes(sizes: list[int], engine_buckets: tuple[int, ...]) -> list[str]:
    """What the engine would do with each batch size that is not one of its graph buckets."""
    notes = []
    for size in sizes:
        larger = [bucket for bucket in engine_buckets if bucket >= size]
        if not larger:
            notes.append(f"batch {size} is past the engine's largest bucket {engine_buckets[-1]}: "
                         f"the engine never runs a step this large (its steps stop at max_batch)")
        elif larger[0] != size:
            notes.append(f"batch {size} runs padded to the engine's bucket {larger[0]}")
    return notes


def gpu_ms(run, repeats: int) -> float:
    run()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        run()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / repeats


class FrameBench:
    """The model with its slots prefilled, and each slot's next talker position (every decode step here
    advances its rows' positions, which set the context the floor is computed at)."""

    def __init__(self, lm: Qwen3TTSLM, args: argparse.Namespace) -> None:
        self.lm, self.args, self.device = lm, args, lm.device
        self.positions: list[int] = []
        self.can_graph = False
        self.is_compiled = False  # Inductor runs on CUDA only (`allocate_slots`)
        self.is_fused = False  # the code predictor's one-kernel attention, the same
        self.is_fused_frame = False  # the fused Triton frame (`runs_fused_frame`), the same
        self.frame = frame_bytes(lm.talker, lm.noise_width)

    def allocate(self, num_slots: int) -> None:
        """Slots (static KV rows) and, on CUDA, every bucket's graphs; eager only where capture fails."""
        start = time.perf_counter()
        try:
            self.lm.allocate_slots(num_slots, self.args.max_seq_len)
        except RuntimeError as exc:  # still measure the eager frame
            print(f"# graph capture failed, eager only: {exc}")
            self.lm.use_cuda_graphs = False
            self.lm.allocate_slots(num_slots, self.args.max_seq_len)
        synchronize(self.device)
        self.positions = [0] * num_slots  # until the prefill
        graphs = self.lm.frame_graphs
        self.can_graph = graphs is not None and self.lm.use_cuda_graphs
        self.is_compiled = self.args.compile and graphs is not None
        self.is_fused = bool(self.lm.talker.code_predictor.model.layers[0].self_attn.short_cache_keys)
        self.is_fused_frame = self.lm.runs_fused_frame()
        self.is_compiled = self.is_compiled and not self.is_fused_frame  # the fused frame leaves Inductor nothing
        print(f"# fused frame {self.is_fused_frame}; torch.compile {'on' if self.is_compiled else 'off'}; "
              f"allocate_slots({num_slots}, {self.args.max_seq_len}) with graph capture of buckets "
              f"{graphs.buckets if self.can_graph else 'none'}: {time.perf_counter() - start:.2f} s; "
              f"varlen flash attention: {self.lm._memory.kv.is_varlen}; fused predictor attention: {self.is_fused}")

    def prefill(self, prompt) -> None:
        num_slots = len(self.positions)
        synchronize(self.device)
        start = time.perf_counter()
        for slot in range(num_slots):
            self.lm.prefill(slot, prompt)
        synchronize(self.device)
        self.positions = [prompt.num_tokens] * num_slots
        print(f"# prefill of {prompt.num_tokens} tokens: {(time.perf_counter() - start) / num_slots * 1e3:.2f} ms each")

    def batch(self, size: int) -> DecodeBatch:
        generators = [torch.Generator(device=self.device).manual_seed(row) for row in range(size)]
        return DecodeBatch(slots=list(range(size)), sampling=[SAMPLING] * size, generators=generators,
                           ignore_eos=[True] * size)

    def decode(self, batch: DecodeBatch, graphed: bool) -> None:
        """One decode step and the engine's device-to-host copy of its codes."""
        self.lm.use_cuda_graphs = graphed
        self.lm.decode(batch)[0].cpu()
        for slot in batch.slots:
            self.positions[slot] += 1

    def context(self, size: int) -> int:
        """Talker keys the next frame of rows 0 .. size - 1 attends over, on average (its own included)."""
        return round(sum(self.positions[:size]) / size) + 1

    def advance_to(self, context: int | None) -> None:
        """Decode every slot until its next frame attends over `context` keys (no-op for None)."""
        if context is None:
            return
        batch, start = self.batch(len(self.positions)), time.perf_counter()
        while min(self.positions) + 1 < context:
            self.decode(batch, self.can_graph)
        synchronize(self.device)
        print(f"# advanced every slot to context {self.context(len(self.positions))}: "
              f"{time.perf_counter() - start:.1f} s")

    def frame_ms(self, batch: DecodeBatch, num_frames: int, graphed: bool) -> float:
        """Wall time of a decode step, each followed by the engine's device-to-host copy."""
        self.decode(batch, graphed)  # warm-up
        synchronize(self.device)
        start = time.perf_counter()
        for _ in range(num_frames):
            self.decode(batch, graphed)
        return (time.perf_counter() - start) / num_frames * 1e3

    def measure(self, size: int) -> dict:
        """One table row: frame times, replay times, the floor at the batch's context, the profile."""
        batch, graphs = self.batch(size), self.lm.frame_graphs
        bucket = graphs.bucket_for(size) if graphs is not None else None
        floor = floor_report(self.frame, size, self.context(size))
        row = {"batch": size, "bucket": bucket, "compiled": self.is_compiled, "fused_predictor": self.is_fused,
               "fused_frame": self.is_fused_frame, "fp8_weights": self.is_fused_frame and self.args.fp8_weights,
               "context": floor["context"],
               "eager_ms": self.frame_ms(batch, self.args.eager_frames, graphed=False),
               **self._replay_columns(batch, bucket),
               "floor_ms": self.frame.talker_weights / BANDWIDTH_BYTES_PER_S * 1e3,
               "frame_floor_ms": floor["floor_ms"], "frame_floor_cached_ms": floor["floor_ms_predictor_cached"],
               "floor": floor}
        if self.args.profile:
            row["profile"] = self._profile(batch, size, bucket)
        return row

    def _replay_columns(self, batch: DecodeBatch, bucket: int | None) -> dict:
        graphs = self.lm.frame_graphs
        if graphs is None:
            return dict(talker_eager_ms=NAN, predictor_eager_ms=NAN, graphs_ms=NAN, talker_ms=NAN, predictor_ms=NAN)
        eager = {"talker_eager_ms": gpu_ms(lambda: graphs.run_talker(bucket, False), 3),
                 "predictor_eager_ms": gpu_ms(lambda: graphs.run_predictor(bucket, False), 3)}
        if not self.can_graph:
            return {**eager, "graphs_ms": NAN, "talker_ms": NAN, "predictor_ms": NAN}
        return {**eager, "graphs_ms": self.frame_ms(batch, self.args.frames, graphed=True),
                "talker_ms": gpu_ms(lambda: graphs.run_talker(bucket, True), self.args.replays),
                "predictor_ms": gpu_ms(lambda: graphs.run_predictor(bucket, True), self.args.replays)}

    def _profile(self, batch: DecodeBatch, size: int, bucket: int | None) -> dict | None:
        if self.lm.frame_graphs is None:
            print(f"# batch {size}: no kernel profile without CUDA (skipped)")
            return None
        try:
            result = profile_bucket(self.lm.frame_graphs, bucket, lambda graphed: self.decode(batch, graphed),
                                    self.can_graph, self.args.top)
        except RuntimeError as exc:  # report and go on with the timings
            print(f"# batch {size}: profiling failed: {exc}")
            return None
        print(format_profile(size, bucket, result, self.args.top), flush=True)
        return result.to_dict()


def print_header(args: argparse.Namespace, device: torch.device) -> None:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"# {name} torch {torch.__version__} model {args.model} bf16 | fused frame {args.fused_frame} "
          f"(fp8 weights {args.fp8_weights}) | "
          f"compiled {args.compile} | fused predictor "
          f"{args.fused_predictor} (launch {os.environ.get('VOXLANE_SHORT_ATTENTION_LAUNCH', 'default')}) | "
          f"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={os.environ.get('CUDA_MPS_ACTIVE_THREAD_PERCENTAGE', 'unset')}")
    if device.type == "cuda":
        print(f"# L2 cache {torch.cuda.get_device_properties(device).L2_cache_size / 2**20:.0f} MiB")


def print_frame_bytes(bench: FrameBench, engine_buckets: tuple[int, ...]) -> None:
    frame = bench.frame
    print(f"# talker weights read per step {frame.talker_weights / 1e9:.3g} GB -> floor "
          f"{frame.talker_weights / BANDWIDTH_BYTES_PER_S * 1e3:.3g} ms; predictor weights per step "
          f"{frame.predictor_step_weights / 1e9:.3g} GB x {frame.num_predictor_steps} steps + heads "
          f"{frame.predictor_heads / 1e9:.3g} GB; talker KV {frame.talker_kv_per_position / 1024:.3g} KiB per "
          f"position and row")
    print(f"# the engine's graph buckets (EngineConfig.max_batch {EngineConfig().max_batch}): {engine_buckets}")
    for note in bucket_notes(bench.args.batch_sizes, engine_buckets):
        print(f"# {note}")


def check_positions(args: argparse.Namespace, num_prompt_tokens: int) -> None:
    start = max(num_prompt_tokens, (args.context or 0) - 1)
    if start + frames_per_slot(args) >= args.max_seq_len:
        raise SystemExit(f"--max-seq-len {args.max_seq_len} is too short: the slots start at position {start} "
                         f"and take {frames_per_slot(args)} frames; raise it or lower --context")


HEADER = ("batch", "bucket", "eager", "graphs", "talker", "predictor", "talker_eager", "predictor_eager",
          "floor", "talker/floor", "context", "frame_floor", "graphs/frame_floor")


def row_line(row: dict) -> str:
    def cell(value: float, digits: int) -> str:
        return "-" if value != value else f"{value:.{digits}f}"  # NaN: not measured
    return " | ".join((str(row["batch"]), str(row["bucket"] or "-"), cell(row["eager_ms"], 2),
                       cell(row["graphs_ms"], 2), cell(row["talker_ms"], 3), cell(row["predictor_ms"], 2),
                       cell(row["talker_eager_ms"], 2), cell(row["predictor_eager_ms"], 2), cell(row["floor_ms"], 3),
                       cell(row["talker_ms"] / row["floor_ms"], 2), str(row["context"]),
                       cell(row["frame_floor_ms"], 3), cell(row["graphs_ms"] / row["frame_floor_ms"], 2)))


def save_rows(args: argparse.Namespace, rows: list[dict]) -> None:
    """The rows so far, profiles included, to --json (after every row: a run cut short keeps what it measured)."""
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"model": args.model, **row} for row in rows], f, indent=1)


def print_rows(args: argparse.Namespace, rows: list[dict]) -> None:
    """One JSON line per row, without the floor's terms and the profile (`voxlane microbench` reads them)."""
    pct = int(os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "100"))
    for row in rows:
        flat = {k: round(v, 3) if isinstance(v, float) else v for k, v in row.items() if k not in ("floor", "profile")}
        print(json.dumps({"bench": "lm", "model": args.model, "mps_pct": pct, **flat}), flush=True)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    device = pick_device(args.device)
    print_header(args, device)
    lm = Qwen3TTSLM.from_config(preset_config(args.model), device=device, dtype=torch.bfloat16, seed=0)
    lm.use_torch_compile = args.compile
    lm.use_fused_predictor = args.fused_predictor
    lm.use_fused_frame = args.fused_frame
    lm.use_fp8_weights = args.fp8_weights
    bench = FrameBench(lm, args)
    bench.allocate(max(args.batch_sizes))
    prompt = lm.encode_prompt(TEXT, None)
    check_positions(args, prompt.num_tokens)
    bench.prefill(prompt)
    print_frame_bytes(bench, batch_buckets(lm.graph_batch_sizes, EngineConfig().max_batch))
    bench.advance_to(args.context)
    print(" | ".join(HEADER))
    rows = []
    for size in args.batch_sizes:
        try:
            row = bench.measure(size)
        except RuntimeError as exc:  # report and go on with the other sizes
            print(f"{size} | failed: {exc}", flush=True)
            continue
        rows.append(row)
        print(row_line(row), flush=True)
        save_rows(args, rows)
    print_rows(args, rows)


if __name__ == "__main__":
    with torch.no_grad():
        main()
