"""Any family's decode step timed at several row counts, as the LM lane runs it (compiled and graphed on CUDA).

    python3 -m tools.step_time --preset voxtral-4b --device cuda --rows 1 8 32
    python3 -m tools.step_time --preset voxtral-tiny --rows 1 8          # the CPU, float32

A step of N rows should cost far less than N steps of one (tests/unit/test_step_batching.py counts that on the
CPU). Where a GPU's step does not, this says which part grows: for each row count, the step's median wall time,
its time per row, and, with `--profile`, the kernels one step launches and the ones that take the most GPU time.
It also counts the graphs torch.compile made while timing (after the warm-up): a count above 0 is a recompile on
the hot path. One JSON line per row count.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import Counter

import torch

from backend_python.models import registry
from tests.unit.test_step_batching import decode_batch, prompt


def compiled_graphs() -> int:
    """Graphs torch.compile has made in this process so far (0 where dynamo never ran)."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return 0
    return int(counters["stats"]["unique_graphs"])


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def step_s(lm, rows: int, device: torch.device) -> float:
    batch = decode_batch(rows, device)
    synchronize(device)
    started = time.perf_counter()
    lm.decode(batch)
    synchronize(device)
    return time.perf_counter() - started


def kernels(lm, rows: int, device: torch.device, top: int) -> dict:
    """The kernels (CUDA) or aten ops (CPU) of one step: how many, and the `top` longest by total time."""
    activities = [torch.profiler.ProfilerActivity.CUDA if device.type == "cuda" else torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=activities) as prof:
        lm.decode(decode_batch(rows, device))
        synchronize(device)
    events = [e for e in prof.events() if (e.device_type == torch.autograd.DeviceType.CUDA) == (device.type == "cuda")]
    spent: Counter = Counter()
    for event in events:
        spent[event.name] += event.device_time_total if device.type == "cuda" else event.cpu_time_total
    return {"num_kernels": len(events),
            "longest_us": [[name[:80], round(us, 1)] for name, us in spent.most_common(top)]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="voxtral-tiny")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default=None, help="default: bfloat16 on cuda, float32 on the CPU")
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--steps", type=int, default=10, help="timed steps per row count")
    parser.add_argument("--max-seq-len", type=int, default=512)
    parser.add_argument("--no-compile", dest="compile", action="store_false")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--top", type=int, default=8)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    dtype = args.dtype or ("bfloat16" if device.type == "cuda" else "float32")
    torch.set_grad_enabled(False)
    spec = registry.resolve(args.preset)
    lm = registry.load_lm(spec, args.device, dtype)
    lm.use_torch_compile = args.compile and device.type == "cuda"  # as the LM lane sets it (LaneSettings)
    num_rows = max(args.rows)
    started = time.perf_counter()
    lm.allocate_slots(num_rows, args.max_seq_len, max_batch=num_rows)  # on CUDA: compiles and captures the buckets
    set_up_s = time.perf_counter() - started
    for row in range(num_rows):
        lm.prefill(row, prompt(lm, row))
    for rows in args.rows:  # warm-up: each row count's first step (a graph's first replay, lazy tables)
        step_s(lm, rows, device)
    graphs_before = compiled_graphs()
    for rows in args.rows:
        times = [step_s(lm, rows, device) for _ in range(args.steps)]
        median = statistics.median(times)
        line = {"preset": args.preset, "device": args.device, "dtype": dtype, "rows": rows,
                "step_ms": round(1e3 * median, 3), "ms_per_row": round(1e3 * median / rows, 3),
                "max_ms": round(1e3 * max(times), 3), "set_up_s": round(set_up_s, 1),
                "graphs_compiled_while_timed": compiled_graphs() - graphs_before}
        if args.profile:
            line.update(kernels(lm, rows, device, args.top))
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
