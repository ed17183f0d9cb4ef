"""The code predictor's attention as one Triton kernel (`kernels/short_attention.py`): the kernel against its
PyTorch reference, the predictor's tokens with it against the plain attention, and the op under torch.compile.

On a CUDA machine the tests run the kernel on the GPU. Without one they run it under Triton's interpreter on
the CPU (`TRITON_INTERPRET=1`, which must be set before Triton compiles anything, so a process of its own:
`test_the_kernel_tests_pass_under_the_interpreter`). Without Triton installed they skip: the kernel is an
optional speed-up of the CUDA path, and the predictor keeps PyTorch's attention there."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from backend_python.models.base import SamplingParams
from backend_python.models.kernels import short_attention
from backend_python.models.layers.decoder import rope_cos_sin
from backend_python.models.qwen3_tts import Qwen3TTSLM, preset_config
from tests.interpreter import needs_interpreter_run, run_under_interpreter
from tests.unit.lm_graph_helpers import decode_frames, needs_cuda, sampling_mixes

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
runs_kernel = pytest.mark.skipif(not short_attention.is_available(torch.device(DEVICE)),
                                 reason="needs CUDA, or Triton's interpreter (TRITON_INTERPRET=1)")
GREEDY = SamplingParams(temperature=0.0, repetition_penalty=1.05)
SAMPLED = SamplingParams(temperature=0.9, top_k=50, top_p=0.9, repetition_penalty=1.05)
MIXES = sampling_mixes(GREEDY, SAMPLED)


@needs_interpreter_run
def test_the_kernel_tests_pass_under_the_interpreter():
    run_under_interpreter(__file__, "not under_the_interpreter and not torch_compile")


def random_step(batch: int, num_tokens: int, first: int, num_heads: int, num_kv_heads: int, dim: int,
                dtype: torch.dtype, positions_per_row: int = 16, seed: int = 0) -> dict:
    """The inputs of one call: rows out of order in the cache (row b starts at starts[b]), keys before `first`
    already cached, num_tokens new tokens at first, first + 1, ...; the positions a broadcast view, the starts
    a strided one (as the predictor's steps pass them)."""
    gen = torch.Generator().manual_seed(seed)
    rand = lambda *shape: torch.randn(*shape, generator=gen).to(dtype)  # noqa: E731
    positions = (torch.arange(num_tokens) + first).expand(batch, -1)
    starts = torch.randperm(batch, generator=gen) * positions_per_row
    cos, sin = rope_cos_sin(positions, dim, 10000.0, dtype)
    pool = (batch + 1) * positions_per_row
    return dict(qkv=rand(batch, num_tokens, (num_heads + 2 * num_kv_heads) * dim),
                q_weight=(torch.rand(dim, generator=gen) + 0.5).to(dtype),
                k_weight=(torch.rand(dim, generator=gen) + 0.5).to(dtype), eps=1e-6, cos=cos, sin=sin,
                positions=positions, write_index=starts[:, None] + positions,
                key_starts=torch.stack((starts, -starts), dim=1)[:, 0],  # strided, as the masked path's view
                k_cache=rand(pool, num_kv_heads, dim), v_cache=rand(pool, num_kv_heads, dim),
                num_heads=num_heads, num_kv_heads=num_kv_heads)


def on_device(inputs: dict) -> dict:
    return {k: v.to(DEVICE) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}


@runs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("num_tokens,first", [(2, 0), (1, 2), (1, 9), (1, 15)])
@pytest.mark.parametrize("normed", [True, False])
@pytest.mark.parametrize("heads_per_program", [0, 1])
def test_the_kernel_is_its_reference(dtype, num_tokens, first, normed, heads_per_program):
    """Output and both caches (every position: the step's keys written where they belong, nothing else touched),
    GQA 4 heads over 2, the predictor's first step (2 tokens) and later ones; a program per KV head's group, or
    per query head (the group's first writes the keys)."""
    inputs = on_device(random_step(3, num_tokens, first, 4, 2, 32, dtype))
    if not normed:
        inputs.update(q_weight=None, k_weight=None)
    expected_inputs = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
    expected = short_attention.short_cache_attention_reference(**expected_inputs)
    got = short_attention.short_cache_attention(**inputs, max_keys=16, heads_per_program=heads_per_program)
    tolerance = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=4e-2, rtol=2e-2)
    torch.testing.assert_close(got.float(), expected.float(), **tolerance)
    torch.testing.assert_close(inputs["k_cache"].float(), expected_inputs["k_cache"].float(), **tolerance)
    torch.testing.assert_close(inputs["v_cache"], expected_inputs["v_cache"], atol=0, rtol=0)
    assert not torch.equal(inputs["k_cache"], random_step(3, num_tokens, first, 4, 2, 32, dtype)["k_cache"].to(DEVICE))


@runs_kernel
def test_a_query_sees_no_key_after_its_own_position():
    """Keys past a query's position (left from an earlier frame) do not move its output."""
    inputs = on_device(random_step(2, 1, 4, 4, 2, 32, torch.float32))
    before = short_attention.short_cache_attention(**inputs, max_keys=16)
    inputs["k_cache"][inputs["write_index"][:, 0] + 1] += 100.0  # position 5 of each row
    inputs["v_cache"][inputs["write_index"][:, 0] + 1] += 100.0
    after = short_attention.short_cache_attention(**inputs, max_keys=16)
    assert torch.equal(before, after)


@needs_cuda  # Triton's interpreter cannot run on the fake tensors torch.compile traces with
def test_the_op_under_torch_compile_writes_the_caches_it_is_given():
    """A compiled caller (the layers are compiled with fullgraph on CUDA) gets the same output and the same caches,
    written in place: the op's mutation of views of the stack's cache survives functionalization."""
    inputs = on_device(random_step(4, 1, 7, 4, 2, 32, torch.float32))
    stack_k, stack_v = torch.stack([inputs["k_cache"]] * 2), torch.stack([inputs["v_cache"]] * 2)
    expected_k, expected_v = stack_k.clone(), stack_v.clone()
    expected = short_attention.short_cache_attention_reference(**{**inputs, "k_cache": expected_k[1],
                                                                  "v_cache": expected_v[1]})

    def layer(k_layers: torch.Tensor, v_layers: torch.Tensor) -> torch.Tensor:
        return short_attention.short_cache_attention(**{**inputs, "k_cache": k_layers[1], "v_cache": v_layers[1]},
                                                     max_keys=16) * 2

    compiled = torch.compile(layer, fullgraph=True)
    got = compiled(stack_k, stack_v)
    torch.testing.assert_close(got, expected * 2, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(stack_k, expected_k, atol=1e-5, rtol=1e-5)
    assert torch.equal(stack_v, expected_v)


def predictor_config():
    """The tiny preset on CPU; on CUDA the 0.6B's predictor shapes (head_dim 128, GQA 16/8) with fewer layers."""
    if DEVICE == "cpu":
        return preset_config("qwen3-tts-tiny")
    cfg = preset_config("qwen3-tts-0.6b")
    predictor = replace(cfg.talker.code_predictor, num_hidden_layers=2)
    return replace(cfg, talker=replace(cfg.talker, num_hidden_layers=3, code_predictor=predictor))


@runs_kernel
@pytest.mark.parametrize("mix", sorted(MIXES))
def test_the_predictor_with_the_kernel_samples_the_tokens_of_the_plain_attention(mix):
    """Frames of four streams (float32): every codebook's token equal with the kernel and without it. On CUDA the
    kernel's side is the engine's own path (compiled layers, CUDA graphs), the other plain eager ops."""
    fused = Qwen3TTSLM.from_config(predictor_config(), device=DEVICE, dtype=torch.float32, seed=0)
    plain = Qwen3TTSLM.from_config(predictor_config(), device=DEVICE, dtype=torch.float32, seed=0)
    plain.use_fused_predictor = plain.use_torch_compile = plain.use_cuda_graphs = False
    fused.use_fused_frame = plain.use_fused_frame = False  # the attention alone: both draw the generators' noise
    if DEVICE == "cpu":  # slots on the CPU skip the CUDA set-up that turns the kernel on
        fused.talker.code_predictor.model.use_short_cache_attention(fused.config.talker.num_code_groups)
    slots, params = [1, 3, 0, 2], MIXES[mix]
    expected = decode_frames(plain, slots, params, num_frames=5, device=DEVICE)
    got = decode_frames(fused, slots, params, num_frames=5, device=DEVICE)
    layers = fused.talker.code_predictor.model.layers
    assert all(layer.self_attn.short_cache_keys == 16 for layer in layers)  # the kernel's path ran
    assert not any(layer.self_attn.short_cache_keys for layer in plain.talker.code_predictor.model.layers)
    assert torch.equal(got, expected), f"{(got == expected).float().mean():.3f} of the codes are equal"


def test_the_switch_turns_the_kernel_off_again():
    lm = Qwen3TTSLM.from_config(preset_config("qwen3-tts-tiny"), seed=0)
    stack = lm.talker.code_predictor.model
    stack.use_short_cache_attention(16)
    assert {layer.self_attn.short_cache_keys for layer in stack.layers} == {16}
    stack.use_short_cache_attention(0)
    assert {layer.self_attn.short_cache_keys for layer in stack.layers} == {0}
    assert short_attention.max_keys_for(16) == 16 and short_attention.max_keys_for(17) == 32
    assert short_attention.max_keys_for(3) == 16


@runs_kernel
def test_with_gradients_on_the_predictor_keeps_pytorch_s_attention():
    """The kernel has no backward: where autograd records (outside the engine's no_grad), the plain path runs."""
    lm = Qwen3TTSLM.from_config(predictor_config(), device=DEVICE, dtype=torch.float32, seed=0)
    lm.talker.fuse_projections()
    lm.talker.code_predictor.model.use_short_cache_attention(16)
    lm.allocate_slots(2, 64)
    predictor, cache = lm.talker.code_predictor, lm._memory.predictor_kv
    y = torch.randn(1, 2, lm.config.talker.hidden_size, device=DEVICE)
    hidden = predictor(y, predictor.frame_step(1, cache, y.device, y.dtype).window(0, 2), cache)
    hidden.sum().backward()
    attention = predictor.model.layers[0].self_attn
    assert attention.q_norm.weight.grad is not None and attention.k_norm.weight.grad.abs().sum() > 0


def test_the_launch_knob_takes_heads_and_warps_and_names_a_bad_value():
    assert short_attention.launch_setting(None) == short_attention.DEFAULT_LAUNCH == (1, 1)
    assert short_attention.launch_setting("2,4") == (2, 4)
    for bad in ("2", "a,b", "1,3", "-1,1"):
        with pytest.raises(ValueError, match="VOXLANE_SHORT_ATTENTION_LAUNCH"):
            short_attention.launch_setting(bad)
