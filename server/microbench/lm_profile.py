"""The kernels of one LM frame in a batch-size bucket, traced with torch.profiler (CUDA only).

Three traces per bucket: the predictor graph's replay, the talker graph's replay, and one whole decode
step (`lm.decode`: the host's input fill and noise draws, both replays, the codes' copy to the host), so
the kernels outside the graphs are counted too. Each half is also traced as its eager twin (the same
functions run kernel by kernel on the same padded buffers): its count should equal the replay's. A
trace that records no kernel inside a graph replay (a CUPTI that does not see into graphs) falls back
to the twins, and the report says so.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch.profiler import ProfilerActivity, profile

from server.microbench.kernel_classes import Kernel, KernelClass, KernelSummary, summarize

def trace(run: Callable[[], object]) -> list[Kernel]:
    """The GPU activities (kernels, memcpys, memsets) of one call of `run`, after one untraced call."""
    run()  # lazy initialisation and allocator growth stay out of the trace
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    return [Kernel(e.name, e.time_range.start, e.time_range.end) for e in prof.events()
            if e.device_type == torch.autograd.DeviceType.CUDA and not is_annotation(e)]


def is_annotation(event) -> bool:
    """A range on the GPU's timeline named after a CPU-side annotation (e.g. "Torch-Compiled Region"), not work."""
    kind = str(getattr(event, "activity_type", ""))  # "gpu_user_annotation"; absent from older torch
    return bool(getattr(event, "is_user_annotation", False)) or "annotation" in kind


@dataclass(frozen=True)
class BucketProfile:
    """The kernels of a bucket's frame: each half as the graphs replay it (or as its eager twin, `source`)."""

    source: str  # "graph replays" or "eager twins"
    halves: dict[str, KernelSummary]  # "predictor", "talker"
    eager_counts: dict[str, int]  # kernels of each half's eager twin
    step: KernelSummary  # one whole decode step

    @property
    def num_outside_graphs(self) -> int:
        """Kernels of the step that neither half launches: input copies, noise draws, the codes' copies."""
        return self.step.count - sum(half.count for half in self.halves.values())

    def to_dict(self) -> dict:
        return {"source": self.source, "eager_counts": self.eager_counts, "outside_graphs": self.num_outside_graphs,
                "step": self.step.to_dict(), **{name: half.to_dict() for name, half in self.halves.items()}}


def profile_bucket(graphs, bucket: int, decode: Callable[[bool], object], can_graph: bool,
                   num_top: int) -> BucketProfile:
    """`graphs`: the model's `FrameGraphs`; `decode(graphed)`: one decode step of the batch in this bucket."""
    runs = {"predictor": graphs.run_predictor, "talker": graphs.run_talker}
    eager = {half: summarize(trace(lambda run=run: run(bucket, False)), num_top) for half, run in runs.items()}
    replayed = ({half: summarize(trace(lambda run=run: run(bucket, True)), num_top) for half, run in runs.items()}
                if can_graph else {})
    is_graphed = bool(replayed) and sees_into_graphs(replayed, eager)
    step = summarize(trace(lambda: decode(is_graphed)), num_top)
    return BucketProfile("graph replays" if is_graphed else "eager twins", replayed if is_graphed else eager,
                         {half: summary.count for half, summary in eager.items()}, step)


def sees_into_graphs(replayed: dict[str, KernelSummary], eager: dict[str, KernelSummary]) -> bool:
    """Whether the replays' traces hold their kernels: at least half the twins' (they should be equal)."""
    return all(2 * replayed[half].count >= eager[half].count > 0 for half in eager)


def class_header() -> str:
    return " | ".join(("", "kernels", "busy ms", "span ms", *(f"{cls.value} n / ms" for cls in KernelClass)))


def class_line(label: str, summary: KernelSummary) -> str:
    cells = (f"{t.count} / {t.ms:.3f}" for t in summary.classes.values())
    return " | ".join((label, str(summary.count), f"{summary.busy_ms:.3f}", f"{summary.span_ms:.3f}", *cells))


def format_profile(size: int, bucket: int, result: BucketProfile, num_top: int) -> str:
    """The class table of the halves and the step, then each half's longest kernels."""
    lines = [f"## batch {size} (bucket {bucket}): kernels per frame from the {result.source}; "
             f"eager twins {result.eager_counts['predictor']} + {result.eager_counts['talker']}; "
             f"{result.num_outside_graphs} in the step outside the two graphs", class_header()]
    lines += [class_line(half, summary) for half, summary in result.halves.items()]
    lines.append(class_line("decode step", result.step))
    for half, summary in result.halves.items():
        lines.append(f"top {num_top} kernels, batch {size}, {half}: ms | count | class | name")
        lines += [f"  {k.ms:8.3f} | {k.count:5d} | {k.kernel_class.value:11s} | {k.name[:160]}" for k in summary.top]
    return "\n".join(lines)
