"""The SnakeBeta kernel (`kernels/snake.py`): from exponentiated parameters and from the module's log-scale ones,
against the torch expression, for float32, bfloat16 and a strided (trimmed) input; and the codec's module through it.

On a CUDA machine the kernel runs on the GPU; without one, under Triton's interpreter on the CPU (a process of its
own: `test_the_kernel_tests_pass_under_the_interpreter`)."""
from __future__ import annotations

import pytest
import torch

from backend_python.models.kernels import runs_kernels_on, snake
from backend_python.models.qwen3_tts.codec_layers import SnakeBeta
from tests.interpreter import needs_interpreter_run, run_under_interpreter

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
runs_kernel = pytest.mark.skipif(snake.triton is None or not runs_kernels_on(DEVICE),
                                 reason="needs CUDA, or Triton's interpreter (TRITON_INTERPRET=1)")
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 1e-2}


@needs_interpreter_run
def test_the_kernel_tests_pass_under_the_interpreter():
    run_under_interpreter(__file__, "kernel and not under_the_interpreter")


def inputs(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 5, 1100, generator=gen).to(dtype).to(DEVICE)
    trimmed = torch.randn(2, 5, 1150, generator=gen).to(dtype).to(DEVICE)[..., :1100]  # a trimmed conv output
    return x, trimmed


@runs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kernel_from_exponentiated_parameters(dtype):
    alpha = torch.rand(5, device=DEVICE) + 0.5
    inv_beta = torch.rand(5, device=DEVICE) + 0.5
    for x in inputs(dtype):
        assert snake._fused(x)
        reference = snake.snake_beta_reference(x.float(), alpha, inv_beta)
        got = snake.snake_beta(x, alpha, inv_beta)
        assert got.dtype == dtype and got.is_contiguous()
        torch.testing.assert_close(got.float(), reference, atol=TOLERANCE[dtype], rtol=TOLERANCE[dtype])


@runs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kernel_exponentiates_log_parameters_itself(dtype):
    gen = torch.Generator().manual_seed(1)
    log_alpha, log_beta = (torch.randn(5, generator=gen).mul(0.5).to(dtype).to(DEVICE) for _ in range(2))
    alpha = torch.exp(log_alpha.float())
    inv_beta = 1.0 / (torch.exp(log_beta.float()) + 1e-9)
    for x in inputs(dtype):
        reference = snake.snake_beta_reference(x.float(), alpha, inv_beta)
        got = snake.snake_beta_log(x, log_alpha, log_beta)
        torch.testing.assert_close(got.float(), reference, atol=TOLERANCE[dtype], rtol=TOLERANCE[dtype])
    # the log-scale form is not the exponentiated one: passing one for the other must not agree
    wrong = snake.snake_beta(inputs(dtype)[0], log_alpha.float(), log_beta.float())
    assert not torch.allclose(wrong.float(), snake.snake_beta_log(inputs(dtype)[0], log_alpha, log_beta).float(),
                              atol=1e-2)


@runs_kernel
def test_the_codec_module_runs_the_kernel_as_its_torch_expression():
    module = SnakeBeta(5).to(DEVICE)
    with torch.no_grad():
        module.alpha.copy_(torch.linspace(-1.0, 1.0, 5))
        module.beta.copy_(torch.linspace(0.5, -0.5, 5))
    x = inputs(torch.float32)[0]
    expected = x + torch.pow(torch.sin(x * torch.exp(module.alpha)[None, :, None]), 2) \
        / (torch.exp(module.beta)[None, :, None] + 1e-9)
    with torch.no_grad():
        torch.testing.assert_close(module(x), expected, atol=1e-5, rtol=1e-5)


def test_the_module_without_the_kernel_is_the_torch_expression():
    """Where the kernel does not run (a tensor the kernel does not tile: 2-D), the module takes the expression."""
    module = SnakeBeta(4)
    with torch.no_grad():
        module.alpha.copy_(torch.tensor([0.1, -0.2, 0.3, 0.0]))
        module.beta.copy_(torch.tensor([0.0, 0.2, -0.1, 0.4]))
    x = torch.randn(2, 4, 9)[..., ::2]  # not unit-strided along T: the torch expression
    assert not snake._fused(x)
    alpha, beta = torch.exp(module.alpha)[None, :, None], torch.exp(module.beta)[None, :, None]
    expected = x + torch.sin(x * alpha) ** 2 / (beta + 1e-9)
    with torch.no_grad():
        torch.testing.assert_close(module(x), expected, atol=1e-6, rtol=1e-6)
