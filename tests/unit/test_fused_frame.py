"""The fused LM frame (`kernels/fused_linear.py`, `kernels/sampler.py`, `kernels/rope_write.py`): each kernel
against its PyTorch reference, and Qwen3-TTS frames on the fused kernels against the plain frame on the same
noise.

On a CUDA machine the kernels run on the GPU; without one under Triton's interpreter on the CPU
(`TRITON_INTERPRET=1`, set before Triton compiles anything: a process of its own,
`test_the_kernel_tests_pass_under_the_interpreter`). Without Triton installed they skip."""
from __future__ import annotations


import pytest
import torch

from backend_python.models.base import SamplingParams
from backend_python.models.graphs import frame as frame_module
from backend_python.models.kernels import fused_linear as fl
from backend_python.models.kernels import rope_write as rw
from backend_python.models.kernels import sampler
from backend_python.models.layers.decoder import KVCache, Step, rope_cos_sin
from backend_python.models.layers.sampling import BatchSampling, apply_repetition_penalty, sample
from backend_python.models.qwen3_tts import Qwen3TTSLM, preset_config
from tests.interpreter import needs_interpreter_run, run_under_interpreter
from tests.unit.lm_graph_helpers import decode_frames, sampling_mixes

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
runs_kernels = pytest.mark.skipif(not fl.is_available(torch.device(DEVICE)),
                                  reason="needs CUDA, or Triton's interpreter (TRITON_INTERPRET=1)")
GREEDY = SamplingParams(temperature=0.0, repetition_penalty=1.05)
SAMPLED = SamplingParams(temperature=0.9, top_k=50, top_p=0.9, repetition_penalty=1.05)
MIXES = sampling_mixes(GREEDY, SAMPLED)
# every warp the sampler has: top-k alone, top-p alone, both, neither, k past the vocabulary, greedy
EVERY_WARP = [SAMPLED, GREEDY, SamplingParams(temperature=1.2, top_k=0, top_p=0.8),
              SamplingParams(temperature=0.7, top_k=5, top_p=1.0), SamplingParams(temperature=1.0, top_k=0, top_p=1.0),
              SamplingParams(temperature=1.0, top_k=5000, top_p=0.5), SamplingParams(temperature=0.5, top_k=1)]


@needs_interpreter_run
def test_the_kernel_tests_pass_under_the_interpreter():
    run_under_interpreter(__file__)


def randn(gen: torch.Generator, *shape: int, dtype=torch.float32, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, generator=gen) * scale).to(dtype).to(DEVICE)


# ---- fused_linear ------------------------------------------------------------------------------------------
LINEAR_CASES = [  # rows, outputs, inputs, norm, bias, residual, swiglu, launch (None: launch_for's)
    (1, 64, 128, True, False, True, False, None),
    (3, 48, 96, True, True, False, True, None),
    (5, 64, 256, False, True, True, False, fl.Launch(16, 16, 32, 4, 4, 2)),
    (20, 32, 64, True, False, True, True, fl.Launch(16, 16, 16, 2, 4, 2)),
    (2, 40, 80, True, False, False, False, None),  # K no block divides: masked tail
    (40, 24, 64, False, False, False, True, None),  # several row tiles, a partial column tile
]


@runs_kernels
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", range(len(LINEAR_CASES)))
def test_fused_linear_is_its_reference(dtype, case):
    """Norm, bias, residual and SwiGLU each on and off, split-K, several row and column tiles, a K no block
    divides; the output poisoned first, so every element must be written."""
    m, n, k, norm, bias, residual, swiglu, launch = LINEAR_CASES[case]
    gen = torch.Generator().manual_seed(case)
    width = 2 * n if swiglu else n
    args = dict(x=randn(gen, m, k, dtype=dtype), weight=randn(gen, width, k, dtype=dtype, scale=k ** -0.5),
                norm_weight=(torch.rand(k, generator=gen) + 0.5).to(dtype).to(DEVICE) if norm else None, eps=1e-6,
                bias=randn(gen, width, dtype=dtype) if bias else None,
                residual=randn(gen, m, n, dtype=dtype) if residual else None, swiglu=swiglu)
    expected = fl.fused_linear_reference(**args)
    got = fl.fused_linear(**args, launch=launch)
    assert got.shape == expected.shape and got.dtype == dtype
    assert_linear_close(got, expected, args)


def assert_linear_close(got: torch.Tensor, expected: torch.Tensor, args: dict) -> None:
    """float32: to 2e-5. bf16: each of the up to five roundings may land one step apart from the reference's (sums in
    another order), and a residual add keeps that step at the scale of its inputs where they cancel: elementwise to
    4 steps (2**-6) of the scale of the product (SwiGLU: gate times up) and the residual, on average to a quarter
    step on the GPU. A wrong tile, a missing norm, bias or residual misses by the scale itself."""
    if got.dtype == torch.float32:
        torch.testing.assert_close(got, expected, atol=2e-5, rtol=2e-5)
        return
    linear = fl.fused_linear_reference(**{**args, "residual": None, "swiglu": False}).float().abs()
    scale = linear[..., :linear.shape[-1] // 2].max() * linear[..., linear.shape[-1] // 2:].max() \
        if args["swiglu"] else linear.max()  # SwiGLU: a step of the gate is multiplied by the up projection
    if args["residual"] is not None:
        scale = scale + args["residual"].float().abs().max()
    error = (got.float() - expected.float()).abs()
    assert error.max() <= 2 ** -6 * scale, (error.max(), scale)
    # most elements round alike; Triton's interpreter truncates to bf16 where the GPU rounds to nearest: a step each
    assert error.mean() <= (2 ** -10 if DEVICE == "cuda" else 2 ** -8) * scale, (error.mean(), scale)


@runs_kernels
def test_fused_linear_takes_strided_rows_and_writes_float32_logits():
    """The predictor's head reads the last token of each row ([B, T, H][:, -1], strided) and writes float32 logits,
    rounded first to the model's dtype as `head(x).float()` is."""
    gen = torch.Generator().manual_seed(7)
    x = randn(gen, 3, 2, 64, dtype=torch.bfloat16)[:, -1]
    weight, norm = randn(gen, 96, 64, dtype=torch.bfloat16, scale=0.125), randn(gen, 64, dtype=torch.bfloat16)
    got = fl.fused_linear(x, weight, norm, 1e-6, out_dtype=torch.float32)
    expected = fl.fused_linear_reference(x.contiguous(), weight, norm, 1e-6).float()
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, expected, atol=3e-2, rtol=2e-2)
    assert torch.equal(got, got.to(torch.bfloat16).float())  # bf16 values: rounded before the float32 store


@runs_kernels
@pytest.mark.parametrize("case", [0, 1, 2, 3])
def test_fused_linear_with_fp8_weights_is_its_reference(case):
    """Float8 weights (a scale per output row), widened in the kernel: the reference on the same quantised weight,
    SwiGLU's two halves each with their own scales, split-K; past the kernel's rows, the same function on cuBLAS."""
    m, n, k, norm, bias, residual, swiglu, launch = LINEAR_CASES[case]
    gen = torch.Generator().manual_seed(100 + case)
    width = 2 * n if swiglu else n
    weight = fl.quantize_fp8(randn(gen, width, k, dtype=torch.bfloat16, scale=k ** -0.5))
    args = dict(x=randn(gen, m, k, dtype=torch.bfloat16), weight=weight,
                norm_weight=(torch.rand(k, generator=gen) + 0.5).to(torch.bfloat16).to(DEVICE) if norm else None,
                eps=1e-6, bias=randn(gen, width, dtype=torch.bfloat16) if bias else None,
                residual=randn(gen, m, n, dtype=torch.bfloat16) if residual else None, swiglu=swiglu)
    expected = fl.fused_linear_reference(**args)
    assert_linear_close(fl.fused_linear(**args, launch=launch), expected, args)
    assert_linear_close(fl.torch_linear(**args), expected, args)


def test_fp8_quantisation_keeps_each_weight_to_its_row_s_step():
    """e4m3 has 3 mantissa bits: each weight within half a step (2**-4 of its magnitude) or, near zero, of the
    row's smallest normal step; the row's largest weight lands on 448 exactly."""
    weight = torch.randn(64, 256) * torch.linspace(0.01, 3.0, 64)[:, None]
    fp8 = fl.quantize_fp8(weight)
    assert fp8.data.dtype == torch.float8_e4m3fn and fp8.scale.shape == (64,)
    error = (fp8.dequantize(torch.float32) - weight).abs()
    assert (error <= weight.abs() * 2 ** -4 + fp8.scale[:, None] * 2 ** -9).all()
    assert torch.equal(fp8.data.float().abs().amax(dim=1), torch.full((64,), 448.0))


def test_past_the_kernel_rows_it_is_pytorch_s_function(monkeypatch):
    """More rows than MAX_KERNEL_ROWS (cuBLAS's regime) or a CPU without the interpreter: the PyTorch path."""
    gen = torch.Generator().manual_seed(3)
    x, weight, norm = randn(gen, 6, 32), randn(gen, 64, 32), randn(gen, 32)
    monkeypatch.setattr(fl, "MAX_KERNEL_ROWS", 4)
    got = fl.fused_linear(x, weight, norm, 1e-6, swiglu=True)
    torch.testing.assert_close(got, fl.torch_linear(x, weight, norm, 1e-6, swiglu=True))
    torch.testing.assert_close(got, fl.fused_linear_reference(x, weight, norm, 1e-6, swiglu=True), atol=1e-5, rtol=1e-5)


def test_launches_fill_the_gpu_and_divide_k():
    one_row = fl.launch_for(1, 1024, 3072)  # the predictor's down projection at batch 1: 16 tiles of 64 columns
    assert one_row.block_m == 16 and one_row.split_k > 1 and 3072 % (one_row.block_k * one_row.split_k) == 0
    assert fl.launch_for(128, 6144, 2048).block_m == 64
    wide = fl.launch_for(1, 12288, 2048)
    assert wide.split_k == 1  # 192 tiles already fill the GPU
    assert fl.Launch.parse("16,64,128,2,4,3") == fl.Launch(16, 64, 128, 2, 4, 3)
    for bad in ("16,64", "15,64,128,1,4,3", "16,64,128,0,4,3"):
        with pytest.raises(ValueError):
            fl.Launch.parse(bad)


# ---- the sampler -------------------------------------------------------------------------------------------
def batch_sampling(params: list[SamplingParams]) -> BatchSampling:
    return BatchSampling.build(params, torch.device(DEVICE))


@runs_kernels
@pytest.mark.parametrize("vocab", [2048, 100, 3000])
def test_the_sampler_draws_the_reference_s_tokens_on_the_same_noise(vocab):
    """Every warp (top-k, top-p, both, neither, k past the vocabulary, greedy) on 10 draws of logits and noise:
    the tokens `sample` draws, exactly (random logits have no ties)."""
    s = batch_sampling(EVERY_WARP)
    gen = torch.Generator().manual_seed(vocab)
    for _ in range(10):
        logits = randn(gen, len(EVERY_WARP), vocab, scale=3.0)
        noise = torch.empty(len(EVERY_WARP), vocab).exponential_(generator=gen).clamp_min(sampler.TINY).to(DEVICE)
        assert torch.equal(sampler.fused_sample(logits, s, noise=noise), sample(logits, s, noise))


@runs_kernels
def test_codebook_0_penalises_masks_and_records_as_the_frame_does():
    """With rows, the repetition record, suppressed ids and EOS blocking: the plain frame's codebook-0 sampling
    (`Qwen3TTSLM._sample_code0`), and the sampled token marked seen in the row's record."""
    vocab, eos = 300, 290
    gen = torch.Generator().manual_seed(11)
    params = [SAMPLED, GREEDY, SAMPLED, GREEDY]
    s = batch_sampling(params)
    rows = torch.tensor([[5, 0], [2, 0], [7, 0], [2, 0]], device=DEVICE)[:, 0]  # strided, as a column of the ints
    logits = randn(gen, 8, vocab, scale=3.0)
    seen = (torch.rand(8, vocab, generator=gen) < 0.2).to(DEVICE)
    suppressed = torch.zeros(vocab, dtype=torch.bool, device=DEVICE)
    suppressed[280:] = True
    suppressed[eos] = False
    logits[:, eos] = 50.0  # EOS wins wherever it is allowed
    blocked = torch.tensor([True, False, False, True], device=DEVICE)
    noise = torch.empty(4, vocab).exponential_(generator=gen).to(DEVICE)
    penalised = apply_repetition_penalty(logits[rows], seen[rows], s.repetition_penalty)
    mask = suppressed.expand(4, -1).clone()
    mask[:, eos] = blocked
    expected = sample(penalised.masked_fill(mask, float("-inf")), s, noise)
    got_seen = seen.clone()
    got = sampler.fused_sample(logits, s, noise=noise, rows=rows, seen=got_seen, suppressed=suppressed, eos_id=eos,
                               is_eos_blocked=blocked)
    assert torch.equal(got, expected)
    assert got[2].item() == eos and got[0].item() != eos and got[3].item() != eos
    assert (got < 280).logical_or(got == eos).all()
    expected_seen = seen.clone()
    expected_seen[rows, expected] = True
    assert torch.equal(got_seen, expected_seen)


@runs_kernels
def test_the_noise_is_exponential_and_keyed_by_seed_counter_and_draw():
    keys = torch.tensor([[1, 0], [1, 1], [2, 0], [sampler.seed_key(2 ** 64 - 5), 7]], device=DEVICE)
    noise = sampler.philox_exponential(keys, 100, 8192)
    assert torch.equal(noise, sampler.philox_exponential(keys, 100, 8192))  # a key gives the same draws
    assert (noise > 0).all()
    mean, var = noise.mean(dim=1), noise.var(dim=1)
    assert ((mean - 1).abs() < 0.06).all() and ((var - 1).abs() < 0.15).all(), (mean, var)  # Exp(1): 5 and 4 sigma
    tail = (noise > 3).float().mean(dim=1)  # P(Exp(1) > 3) = 0.0498
    assert ((tail - 0.0498).abs() < 0.013).all(), tail
    for a, b in ((0, 1), (0, 2), (2, 3)):  # another counter or seed: unrelated draws
        assert abs(torch.corrcoef(noise[[a, b]])[0, 1]) < 0.05
    shifted = sampler.philox_exponential(keys[:1], 164, 64)  # draw numbers, not positions in a call
    assert torch.equal(shifted[0], noise[0, 64:128])
    alone = sampler.philox_exponential(keys[2:3], 100, 8192)  # a row's draws do not depend on its neighbours
    assert torch.equal(alone[0], noise[2])


@runs_kernels
def test_the_sampler_with_keys_draws_what_the_keys_noise_gives():
    s = batch_sampling(EVERY_WARP)
    keys = torch.tensor([[seed, 3] for seed in range(len(EVERY_WARP))], device=DEVICE)
    logits = randn(torch.Generator().manual_seed(5), len(EVERY_WARP), 2048, scale=3.0)
    expected = sample(logits, s, sampler.philox_exponential(keys, 4096, 2048))
    assert torch.equal(sampler.fused_sample(logits, s, noise_keys=keys, noise_offset=4096), expected)
    with pytest.raises(ValueError, match="exactly one"):
        sampler.fused_sample(logits, s)


def test_seed_keys_are_the_int64_of_a_64_bit_seed():
    assert sampler.seed_key(5) == 5 and sampler.seed_key(2 ** 64 - 1) == -1 and sampler.seed_key(2 ** 63) == -2 ** 63
    generators = [torch.Generator().manual_seed(2 ** 64 - 2), torch.Generator().manual_seed(9)]
    assert sampler.noise_keys(generators, [4, 0]).tolist() == [[-2, 4], [9, 0]]


# ---- q/k norm, RoPE and the cache write ---------------------------------------------------------------------
@runs_kernels
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("normed", [True, False])
def test_rope_write_is_its_reference(dtype, normed):
    """Queries out, keys and values written at each token's pool position (rows out of order), nothing else."""
    gen = torch.Generator().manual_seed(1)
    b, t, heads, kv_heads, dim = 3, 2, 4, 2, 32
    positions = torch.tensor([[5, 6], [0, 1], [9, 10]])
    cos, sin = rope_cos_sin(positions, dim, 10000.0, dtype)
    write_index = torch.tensor([[45, 46], [20, 21], [9, 10]])
    args = dict(qkv=randn(gen, b, t, (heads + 2 * kv_heads) * dim, dtype=dtype),
                q_weight=(torch.rand(dim, generator=gen) + 0.5).to(dtype).to(DEVICE) if normed else None,
                k_weight=(torch.rand(dim, generator=gen) + 0.5).to(dtype).to(DEVICE) if normed else None,
                eps=1e-6, cos=cos.to(DEVICE), sin=sin.to(DEVICE), write_index=write_index.to(DEVICE),
                num_heads=heads, num_kv_heads=kv_heads)
    cache = randn(gen, 2, 64, kv_heads, dim, dtype=dtype)
    expected_cache, got_cache = cache.clone(), cache.clone()
    expected = rw.rope_write_reference(**args, k_cache=expected_cache[0], v_cache=expected_cache[1])
    got = rw.rope_write(**args, k_cache=got_cache[0], v_cache=got_cache[1])
    tolerance = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=4e-2, rtol=2e-2)
    torch.testing.assert_close(got.float(), expected.float(), **tolerance)
    torch.testing.assert_close(got_cache.float(), expected_cache.float(), **tolerance)
    assert not torch.equal(got_cache[0], cache[0]) and torch.equal(got_cache[1], expected_cache[1])


# ---- layers and frames -------------------------------------------------------------------------------------
@runs_kernels
@pytest.mark.parametrize("rows,tokens", [(1, 12), (4, 1), (3, 5)])
def test_a_fused_layer_is_the_plain_layer(rows, tokens):
    """A talker layer (prefill-like and decode-like steps, float32): output and both caches."""
    lm = Qwen3TTSLM.from_config(preset_config("qwen3-tts-tiny"), device=DEVICE, seed=0)
    lm.talker.model.use_fused_kernels()
    layer = lm.talker.model.layers[0]
    cache = KVCache.allocate(1, rows + 1, 2, 64, 16, DEVICE, torch.float32, is_varlen=False)
    cache.k.normal_()
    cache.v.normal_()
    step = Step.build(torch.arange(rows, device=DEVICE), torch.arange(tokens, device=DEVICE).expand(rows, -1) + 3, 16,
                      1e6, cache, torch.float32)
    x = torch.randn(rows, tokens, 64, device=DEVICE)
    k_plain, v_plain, k_fused, v_fused = cache.k[0].clone(), cache.v[0].clone(), cache.k[0].clone(), cache.v[0].clone()
    layer.is_fused = False
    with torch.no_grad():
        plain = layer(x, step, k_plain, v_plain)
        layer.is_fused = True
        fused = layer(x, step, k_fused, v_fused)
    torch.testing.assert_close(fused, plain, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(k_fused, k_plain, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(v_fused, v_plain, atol=1e-5, rtol=1e-5)  # the projection sums in another order
    assert not torch.equal(k_fused, cache.k[0])  # the step's keys were written


@runs_kernels
def test_fp8_weights_decode_close_to_the_bf16_frame_and_can_be_turned_off():
    """A tiny frame with float8 projections: its prefill logits close to bf16's (the weights rounded to 3 mantissa
    bits, not a different function), every layer reading float8 copies; off again, the bf16 weights are back."""
    lm = Qwen3TTSLM.from_config(preset_config("qwen3-tts-tiny"), device=DEVICE, dtype=torch.bfloat16, seed=0)
    lm.use_fused_frame, lm.use_cuda_graphs = True, DEVICE == "cuda"
    logits = {}
    for fp8 in (False, True, False):
        lm.use_fp8_weights = fp8
        lm.allocate_slots(4, 64)
        lm.prefill(1, lm.encode_prompt("Hello world, this is a tiny test.", None))
        logits[fp8] = logits.get(fp8, []) + [lm._memory.logits[1].float().cpu()]
        layers = [*lm.talker.model.layers, *lm.talker.code_predictor.model.layers]
        assert all((layer.fp8 is not None) == fp8 for layer in layers)
    assert torch.equal(logits[False][0], logits[False][1])  # off again: exactly the bf16 frame
    cosine = torch.nn.functional.cosine_similarity(logits[True][0], logits[False][0], dim=0)
    assert 0.98 < cosine < 1.0, cosine  # close, and not the same numbers


def test_fused_kernels_refuse_a_stack_with_other_norms():
    from backend_python.models.layers.decoder import DecoderStack
    stack = DecoderStack(1, 32, 64, 2, 1, 16, 1e-6)
    stack.layers[0].input_layernorm = torch.nn.LayerNorm(32)
    with pytest.raises(ValueError, match="RMSNorm"):
        stack.use_fused_kernels()


@runs_kernels
@pytest.mark.parametrize("mix", sorted(MIXES))
def test_fused_frames_sample_the_plain_frames_tokens_on_the_same_noise(mix, monkeypatch):
    """Five frames of four streams (float32): the fused frame (fused layers, the one-kernel sampler drawing its own
    noise) gives every codebook's token of the plain frame when the plain frame draws the same noise."""
    fused = Qwen3TTSLM.from_config(preset_config("qwen3-tts-tiny"), device=DEVICE, dtype=torch.float32, seed=0)
    plain = Qwen3TTSLM.from_config(preset_config("qwen3-tts-tiny"), device=DEVICE, dtype=torch.float32, seed=0)
    plain.use_fused_frame = plain.use_torch_compile = plain.use_cuda_graphs = False
    fused.use_fused_frame = True
    fused.use_cuda_graphs = DEVICE == "cuda"  # on the GPU the frame's CUDA graphs, on the CPU their eager twin
    assert fused.runs_fused_frame() and not plain.runs_fused_frame()
    frames = iter(range(1000))

    def philox_noise(out, params, generators, every_row=False):  # the plain frame's draws, keyed as the fused frame's
        keys = sampler.noise_keys(generators, [next(frames)] * len(generators)).to(out.device)
        out[:len(generators)] = sampler.philox_exponential(keys, 0, out.shape[1])

    monkeypatch.setattr(frame_module, "draw_noise", philox_noise)
    slots, params = [1, 3, 0, 2], MIXES[mix]
    expected = decode_frames(plain, slots, params, num_frames=5, device=DEVICE)
    got = decode_frames(fused, slots, params, num_frames=5, device=DEVICE)
    assert fused.talker.model.layers[0].is_fused and fused.talker.code_predictor.is_fused
    assert fused.frame_graphs.uses_noise_keys
    assert torch.equal(got, expected), f"{(got == expected).float().mean():.3f} of the codes are equal"
    assert len({tuple(row.flatten().tolist()) for row in got}) == len(slots)
