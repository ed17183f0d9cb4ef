"""Tolerances of the golden tests: float32 rounding, derived from the computation instead of read off one CPU.

A float32 result is the exact result plus rounding. Every layer that sums (a matmul, a convolution, a norm)
rounds its sums, and another CPU code path sums in another order (another SIMD width or kernel: PyTorch's
`ATEN_CPU_CAPABILITY`, oneDNN's `ONEDNN_MAX_CPU_ISA`, MKL's `MKL_ENABLE_INSTRUCTIONS`, another CPU), so it rounds
differently. A fixture recorded on one machine and the same computation on another each lie within that rounding
of the exact value. The rounding is relative to the signal's scale, and the layers' roundings, of either sign,
add up like a random walk: with the square root of the layers a signal crosses (the probabilistic bound of
rounding analysis; a worst-case sum, linear in the layers, would let a deep network's broken layer through). So a
golden comparison allows

    atol = ULPS · FLOAT32_EPS · sqrt(depth) · scale

`scale` is the largest magnitude of the expected signal, `depth` the layers with a reduction on its path
(`num_layers` counts them off the model). ULPS covers two independent float32 runs (the fixture's, this
machine's), each within 32 ulps · sqrt(depth) of the exact result: the largest measured against float64 are 27
(DualCodec's decoder under oneDNN's AVX2 kernels) and 19 (VibeVoice's decoder, the fixture's own rounding); the
other golden cases stay below 2. A broken layer moves the output by far more: `broken_layer` breaks one for the
tests that show it (`tests/unit/test_golden_tolerances.py`, and the VibeVoice and DualCodec files).
"""
from __future__ import annotations

import math
from contextlib import contextmanager

import torch

FLOAT32_EPS = torch.finfo(torch.float32).eps  # 2**-23: one rounding's relative error is at most half of it
ULPS = 64
REDUCING_LAYERS = (torch.nn.Linear, torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.ConvTranspose1d, torch.nn.LayerNorm,
                   torch.nn.GroupNorm, torch.nn.BatchNorm1d, torch.nn.BatchNorm2d)


def num_layers(*modules: torch.nn.Module) -> int:
    """The layers of `modules` that sum over their input: linear maps, convolutions and norms, a family's own
    classes of them included (a module holding a matrix or a kernel of its own, a `...Norm`); lookups
    (embeddings, codebooks) and element-wise activations round nothing that adds up."""
    return sum(1 for module in modules for layer in module.modules() if _reduces(layer))


def _reduces(layer: torch.nn.Module) -> bool:
    if isinstance(layer, REDUCING_LAYERS) or type(layer).__name__.endswith("Norm"):
        return True
    if isinstance(layer, torch.nn.Embedding):
        return False
    return any(p.dim() >= 2 for p in layer.parameters(recurse=False))


def float32_atol(expected: torch.Tensor, depth: int) -> float:
    """What float32 rounding on another CPU code path may move a result of `depth` layers whose exact value is
    about `expected` (see the module docstring)."""
    if depth < 1:
        raise ValueError(f"a computation has at least one layer, got depth {depth}")
    expected = torch.as_tensor(expected).detach()
    scale = expected.abs().max().item() if expected.numel() else 0.0
    return ULPS * FLOAT32_EPS * math.sqrt(depth) * scale


def assert_float32_close(actual: torch.Tensor, expected: torch.Tensor, depth: int, msg: str | None = None) -> None:
    """`actual` equals `expected` up to the float32 rounding of `depth` layers, on any CPU."""
    actual, expected = torch.as_tensor(actual), torch.as_tensor(expected)
    torch.testing.assert_close(actual, expected.to(actual.dtype), rtol=0, atol=float32_atol(expected, depth), msg=msg)


def is_float32_close(actual: torch.Tensor, expected: torch.Tensor, depth: int) -> bool:
    actual, expected = torch.as_tensor(actual), torch.as_tensor(expected)
    if actual.shape != expected.shape:
        return False
    return actual.numel() == 0 or bool((actual.double() - expected.double()).abs().max() <= float32_atol(expected, depth))


def assert_recorded_within_rounding(fixture: torch.Tensor, exact: torch.Tensor, depth: int) -> None:
    """The fixture (float32, recorded on some CPU) is within half the tolerance of the exact result (our float64
    computation of it): its own rounding leaves the other half to another CPU's. The same on every CPU, as float64
    rounds 2**29 times finer."""
    error = (torch.as_tensor(fixture).double() - torch.as_tensor(exact).double()).abs().max().item()
    assert error <= float32_atol(fixture, depth) / 2, f"the fixture is {error:.3g} from float64; allowed " \
                                                      f"{float32_atol(fixture, depth):.3g} over {depth} layers"


BROKEN_LAYERS = (0, "middle", -1)  # which of the weighted layers a computation runs the broken-layer tests break


def layers_run(module: torch.nn.Module, run) -> list[torch.nn.Module]:
    """The weighted layers of `module` that `run()` calls, in the order it first calls them (a layer it never
    calls, an encoder's projection in a decode, is not on the path a regression there could reach)."""
    called: dict[int, torch.nn.Module] = {}

    def seen(layer, args, output) -> None:  # a hook that returns nothing leaves the output as it is
        called.setdefault(id(layer), layer)
    hooks = [layer.register_forward_hook(seen) for layer in module.modules()
             if isinstance(getattr(layer, "weight", None), torch.nn.Parameter)]
    try:
        with torch.no_grad():
            run()
    finally:
        for hook in hooks:
            hook.remove()
    return list(called.values())


@contextmanager
def broken_layer(layers: list[torch.nn.Module], which: int | str = -1, size: float = 0.01):
    """One of `layers` (`which`: an index, or "middle") wrong by `size` of its weight's magnitude, in a random
    direction (seeded), as a regression might leave it (a weight misread, mixed up or rounded to half precision);
    restored after. Random, not a scale: a scale before a norm would cancel out."""
    weight = layers[len(layers) // 2 if which == "middle" else which].weight
    saved = weight.detach().clone()
    noise = torch.randn(saved.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    with torch.no_grad():
        weight.add_((noise * size * saved.double().pow(2).mean().sqrt()).to(weight.dtype))
    try:
        yield
    finally:
        with torch.no_grad():
            weight.copy_(saved)
