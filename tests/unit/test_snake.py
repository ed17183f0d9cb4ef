"""The SnakeBeta kernel (`kernels/snake.py`): from exponentiated parameters and from the module's log-scale ones,
against the torch expression, for float32, bfloat16 and a strided (trimmed) input; the codec's module through it;
its fused form (a bias in, the residual base out) and the codec's residual units on it (`ResidualUnit._fused`),
alone, streaming, and through a whole chunked decode.

On a CUDA machine the kernel runs on the GPU; without one, under Triton's interpreter on the CPU (a process of its
own: `test_the_kernel_tests_pass_under_the_interpreter`)."""
from __future__ import annotations

import pytest
import torch

from backend_python.models.codec_stream import POSITION, StreamCarry
from backend_python.models.kernels import runs_kernels_on, snake
from backend_python.models.qwen3_tts import codec_layers
from backend_python.models.qwen3_tts.codec import Qwen3TTSCodec
from backend_python.models.qwen3_tts.codec_config import tiny_codec_config
from backend_python.models.qwen3_tts.codec_layers import ResidualUnit, SnakeBeta
from tests.interpreter import needs_interpreter_run, run_under_interpreter

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
runs_kernel = pytest.mark.skipif(snake.triton is None or not runs_kernels_on(DEVICE),
                                 reason="needs CUDA, or Triton's interpreter (TRITON_INTERPRET=1)")
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 1e-2}


@needs_interpreter_run
def test_the_kernel_tests_pass_under_the_interpreter():
    run_under_interpreter(__file__, "not under_the_interpreter")


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
        assert snake.runs_kernel(x)
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
    assert not snake.runs_kernel(x)
    alpha, beta = torch.exp(module.alpha)[None, :, None], torch.exp(module.beta)[None, :, None]
    expected = x + torch.sin(x * alpha) ** 2 / (beta + 1e-9)
    with torch.no_grad():
        torch.testing.assert_close(module(x), expected, atol=1e-6, rtol=1e-6)


@runs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_fused_form_adds_the_bias_before_and_writes_the_shifted_input(dtype):
    gen = torch.Generator().manual_seed(2)
    log_alpha, log_beta, bias, shift = (torch.randn(5, generator=gen).mul(0.5).to(dtype).to(DEVICE) for _ in range(4))
    alpha, inv_beta = torch.exp(log_alpha.float()), 1.0 / (torch.exp(log_beta.float()) + 1e-9)
    for x in inputs(dtype):
        pre = x.float() + bias.float()[None, :, None]
        y, shifted = snake.snake_beta_fused(x, log_alpha, log_beta, bias=bias, shift=shift)
        tol = TOLERANCE[dtype]
        torch.testing.assert_close(y.float(), snake.snake_beta_reference(pre, alpha, inv_beta), atol=tol, rtol=tol)
        torch.testing.assert_close(shifted.float(), pre + shift.float()[None, :, None], atol=tol, rtol=tol)
        y_only, none = snake.snake_beta_fused(x, log_alpha, log_beta, bias=bias)
        assert none is None and torch.equal(y_only, y)
        alone, no_base = snake.snake_beta_fused(x, log_alpha, log_beta)  # neither: the activation, no second output
        assert no_base is None and torch.equal(alone, snake.snake_beta_log(x, log_alpha, log_beta))
        plain, base = snake.snake_beta_fused(x, log_alpha, log_beta, shift=shift)
        torch.testing.assert_close(plain.float(), snake.snake_beta_log(x, log_alpha, log_beta).float(), atol=tol,
                                   rtol=tol)
        torch.testing.assert_close(base.float(), x.float() + shift.float()[None, :, None], atol=tol, rtol=tol)


def random_unit(dim: int, dilation: int, seed: int) -> ResidualUnit:
    torch.manual_seed(seed)
    unit = ResidualUnit(dim, dilation)
    with torch.no_grad():
        for param in unit.parameters():  # snakes' parameters and biases away from their zero init
            param.add_(torch.randn_like(param) * 0.3)
    unit.conv1.stream_key = "conv1"
    return unit.to(DEVICE).eval()


@runs_kernel
def test_a_fused_residual_unit_equals_the_plain_one(monkeypatch):
    """The unit's fused form against its plain form, whole and streaming (conv1's carried tail), float32."""
    unit = random_unit(6, dilation=3, seed=0)
    x = torch.randn(2, 6, 400, generator=torch.Generator().manual_seed(1)).to(DEVICE)
    tail = torch.randn(2, 6, unit.conv1.left_pad, generator=torch.Generator().manual_seed(2)).to(DEVICE)

    def run(x: torch.Tensor, fused: bool) -> tuple[torch.Tensor, torch.Tensor]:
        monkeypatch.setattr(codec_layers, "FUSED_RESIDUALS", fused)
        carry = StreamCarry({POSITION: torch.zeros(2, dtype=torch.long), "conv1": tail.clone()},
                            torch.tensor([10, 10]), 10, is_ragged=False)
        with torch.no_grad():
            return unit(x), unit(x, carry)

    (whole, streamed), (plain_whole, plain_streamed) = run(x, True), run(x, False)
    torch.testing.assert_close(whole, plain_whole, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(streamed, plain_streamed, atol=1e-5, rtol=1e-5)
    assert (streamed - whole).abs().max() > 1e-3  # the carried tail is read, not zeros


@runs_kernel
def test_a_chunked_decode_on_the_fused_units_equals_the_plain_decode(monkeypatch):
    """The tiny codec chunk by chunk through one carried state, its residual units fused, against the plain whole
    decode: the fused units keep the streaming state as the plain ones do."""
    codec = Qwen3TTSCodec.from_config(tiny_codec_config(), device=DEVICE, seed=3)
    codes = torch.randint(0, codec.codebook_size, (24, codec.num_codebooks),
                          generator=torch.Generator().manual_seed(4)).to(DEVICE)
    monkeypatch.setattr(codec_layers, "FUSED_RESIDUALS", False)
    with torch.no_grad():
        plain = codec.decode(codes[None])[0]
    monkeypatch.setattr(codec_layers, "FUSED_RESIDUALS", True)
    state, pieces = codec.new_stream_state(), []
    with torch.no_grad():
        for start, end in ((0, 2), (2, 6), (6, 14), (14, 24)):
            (audio,), (state,) = codec.decode_stream([state], [codes[start:end]])
            pieces.append(audio)
    torch.testing.assert_close(torch.cat(pieces), plain, atol=1e-4, rtol=0)
