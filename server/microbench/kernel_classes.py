"""Where a frame's GPU time goes: its kernels sorted into classes by name, and summed.

Names are what a GPU trace records (torch.profiler over the CUDA graph replays, or their eager twin):
cuBLAS, flash attention and ATen kernels by their C++ names, Inductor's Triton kernels by the ATen ops
they fuse (`triton_<kind>_fused_<ops>_<n>`; kind `poi` pointwise, `red`/`per` a reduction, `tem` a
template). Copies and memsets the trace records are counted as kernels: they are GPU work of the frame.

A kernel is classed by what its name says it does, not by the layer that launched it: the repetition
penalty before a sort is elementwise, a composite op's pieces (uncompiled RMSNorm's pow, mean, rsqrt)
land in the classes of their kernels. The rules are tried in order and the first match wins; each
rule's comment says which later rule it must come before.
"""
from __future__ import annotations

import enum
import re
from collections import Counter, defaultdict
from dataclasses import dataclass


class KernelClass(enum.Enum):
    GEMM = "gemm"  # matmuls and GEMVs (cuBLAS, CUTLASS, Triton templates), cuBLAS's split-K reduction
    ATTENTION = "attention"  # flash / memory-efficient attention
    SAMPLING = "sampling"  # sort, top-k, softmax, cumsum, argmax, random draws
    NORM = "norm"  # RMSNorm, with whatever Inductor fused into it (residual adds, RoPE, casts)
    COPY = "copy"  # KV writes (index_put), embedding lookups, gathers, copies, memcpy, memset, fills
    ELEMENTWISE = "elementwise"  # RoPE, SiLU * up, residual adds, casts, masks: pointwise kernels
    REDUCTION = "reduction"  # other reductions (sums, means, max)
    OTHER = "other"


_PATTERNS = (
    # before GEMM: xformers/CUTLASS attention is named fmha_cutlass*
    # (and our Triton kernels: the short-cache attention, the talker's q/k norm + RoPE + KV write)
    (KernelClass.ATTENTION, r"flash|fmha|attention|_attn|rope_write"),
    # before REDUCTION: cuBLAS's splitKreduce_kernel belongs to its GEMM
    # (and our fused matmuls with their split-K epilogue: kernels/fused_linear.py)
    (KernelClass.GEMM, r"gemm|gemv|nvjet|xmma|cutlass|cublas|splitkreduce|wmma|triton_tem_|matmul|bmm|addmm|"
                       r"fused_linear|split_k_epilogue"),
    # before REDUCTION (ATen's argmax is reduce_kernel<ArgMaxOps>) and ELEMENTWISE (ATen's random draws are
    # distribution_elementwise kernels)
    (KernelClass.SAMPLING, r"sort|radix|topk|top_k|fillslicewithindex|softmax|cumsum|scan|argmax|multinomial|"
                           r"exponential|distribution_|_sample_kernel"),
    # before ELEMENTWISE: ATen's rsqrt and Inductor's fused norms are pointwise or reductions by kind
    (KernelClass.NORM, r"rms_?norm|layer_?norm|rsqrt"),
    # before ELEMENTWISE: ATen's copies and index_put are elementwise kernels by name (Inductor's `_to_copy`,
    # a cast, matches none of these)
    (KernelClass.COPY, r"index_put|index_elementwise|scatter|gather_kernel|index_?select|embedding|copy_kernel|"
                       r"direct_copy|catarraybatchedcopy|memcpy|memset|fillfunctor"),
    (KernelClass.ELEMENTWISE, r"triton_poi_|elementwise|roll_cuda"),
    (KernelClass.REDUCTION, r"reduce|triton_red_|triton_per_"),
)
RULES: tuple[tuple[KernelClass, re.Pattern], ...] = tuple((cls, re.compile(pattern, re.IGNORECASE))
                                                          for cls, pattern in _PATTERNS)


def classify(name: str) -> KernelClass:
    """The class of the first rule of `RULES` whose pattern occurs in `name`; OTHER when none does."""
    return next((cls for cls, pattern in RULES if pattern.search(name)), KernelClass.OTHER)


@dataclass(frozen=True)
class Kernel:
    """One GPU activity of a trace (a kernel, memcpy or memset); times in microseconds."""

    name: str
    start_us: float
    end_us: float

    @property
    def duration_us(self) -> float:
        return self.end_us - self.start_us


@dataclass(frozen=True)
class ClassTotal:
    count: int
    ms: float


@dataclass(frozen=True)
class TopKernel:
    name: str
    count: int
    ms: float
    kernel_class: KernelClass


@dataclass(frozen=True)
class KernelSummary:
    """The kernels of one traced call: how many, their GPU time per class, the longest by name."""

    count: int
    busy_ms: float  # kernel time summed (overlapping kernels counted each)
    span_ms: float  # first start to last end: busy plus the gaps between kernels
    classes: dict[KernelClass, ClassTotal]  # every class, zeros included
    top: list[TopKernel]  # by total time, longest first

    def to_dict(self) -> dict:
        return {"count": self.count, "busy_ms": round(self.busy_ms, 4), "span_ms": round(self.span_ms, 4),
                "classes": {cls.value: {"count": t.count, "ms": round(t.ms, 4)} for cls, t in self.classes.items()},
                "top": [[k.name, k.count, round(k.ms, 4), k.kernel_class.value] for k in self.top]}


def summarize(kernels: list[Kernel], num_top: int = 15) -> KernelSummary:
    """Counts and GPU time of `kernels`, per class and per name (the `num_top` longest names)."""
    ms_by_name: dict[str, float] = defaultdict(float)
    for kernel in kernels:
        ms_by_name[kernel.name] += kernel.duration_us / 1e3
    count_by_name = Counter(kernel.name for kernel in kernels)
    classes = {cls: ClassTotal(0, 0.0) for cls in KernelClass}
    for name, ms in ms_by_name.items():
        cls = classify(name)
        classes[cls] = ClassTotal(classes[cls].count + count_by_name[name], classes[cls].ms + ms)
    top = sorted(ms_by_name, key=lambda name: -ms_by_name[name])[:num_top]
    span = (max(k.end_us for k in kernels) - min(k.start_us for k in kernels)) / 1e3 if kernels else 0.0
    return KernelSummary(len(kernels), sum(ms_by_name.values()), span, classes,
                         [TopKernel(name, count_by_name[name], ms_by_name[name], classify(name)) for name in top])
