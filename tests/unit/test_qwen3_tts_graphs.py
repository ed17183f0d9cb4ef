"""The CUDA-graph decode path of Qwen3TTSLM: padded buckets equal the unpadded eager frame (CPU),
graph replay equals the same frame run eagerly (CUDA), and the CUDA kernels match the CPU reference."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from backend_python.models.base import DecodeBatch, SamplingParams
from backend_python.models.graphs.buffers import batch_buckets
from backend_python.models.layers.decoder import KVCache
from backend_python.models.qwen3_tts import Qwen3TTSLM, preset_config
from tests.unit.lm_graph_helpers import (TEXTS, assert_close, assert_graph_replay_equals_eager,
                                        assert_padded_equals_eager, decode_frames, needs_cuda, sampling_mixes)

GREEDY = SamplingParams(temperature=0.0, repetition_penalty=1.05)
SAMPLED = SamplingParams(temperature=0.9, top_k=50, top_p=0.9, repetition_penalty=1.05)
MIXES = sampling_mixes(GREEDY, SAMPLED)


def test_buckets_are_capped_by_num_slots_which_is_always_a_bucket():
    assert batch_buckets((1, 2, 4, 8, 16, 32, 64), 32) == (1, 2, 4, 8, 16, 32)
    assert batch_buckets((1, 2, 4, 8, 16, 32, 64), 12) == (1, 2, 4, 8, 12)
    assert batch_buckets((1, 2, 4, 8), 100) == (1, 2, 4, 8, 100)
    with pytest.raises(ValueError):
        batch_buckets((0, 4), 8)


@pytest.mark.parametrize("mix", sorted(MIXES))
def test_padded_bucket_frames_equal_unpadded_eager_frames_on_cpu(mix):
    """The graph path's eager twin (padding rows on the scratch slot, all sampling steps on) is
    the CPU reference frame exactly: padding never leaks into live rows."""
    lm = Qwen3TTSLM.from_config(preset_config("qwen3-tts-tiny"), seed=0)
    assert_padded_equals_eager(lm, MIXES[mix][:3], num_frames=5)


# ---- CUDA ------------------------------------------------------------------------------------
def small_config():
    """The 0.6B shapes (head_dim 128, GQA 16/8, 2048-code codebooks) with fewer layers."""
    cfg = preset_config("qwen3-tts-0.6b")
    predictor = replace(cfg.talker.code_predictor, num_hidden_layers=2)
    return replace(cfg, talker=replace(cfg.talker, num_hidden_layers=3, code_predictor=predictor))


@pytest.fixture(scope="module")
def cuda_lm() -> Qwen3TTSLM:
    return Qwen3TTSLM.from_config(small_config(), device="cuda", dtype=torch.bfloat16, seed=0)


@needs_cuda
def test_cuda_half_caches_read_keys_in_place_with_flash_attention():
    cache = KVCache.allocate(1, 2, 8, 16, 128, torch.device("cuda"), torch.bfloat16)
    assert cache.is_varlen


@needs_cuda
@pytest.mark.parametrize("num_rows", [3, 4])
@pytest.mark.parametrize("mix", sorted(MIXES))
def test_graph_replay_equals_the_eager_frame(cuda_lm, mix, num_rows):
    assert_graph_replay_equals_eager(cuda_lm, MIXES[mix][:num_rows], 6, cuda_lm.config.talker.codebook_size)


@needs_cuda
def test_same_seed_same_tokens_different_seed_different_tokens_under_graphs(cuda_lm):
    cuda_lm.use_cuda_graphs = True
    first = decode_frames(cuda_lm, [1], [SAMPLED], num_frames=4, device="cuda")
    again = decode_frames(cuda_lm, [1], [SAMPLED], num_frames=4, device="cuda")
    assert torch.equal(first, again)
    cuda_lm.allocate_slots(8, 128)
    cuda_lm.prefill(1, cuda_lm.encode_prompt(TEXTS[0], None))
    other = DecodeBatch([1], [SAMPLED], [torch.Generator(device="cuda").manual_seed(7)], [True])
    assert not torch.equal(torch.stack([cuda_lm.decode(other)[0].cpu() for _ in range(4)], dim=1), first)


@needs_cuda
def test_cuda_kernels_match_the_cpu_reference():
    """Fused projections, fused RMSNorm, varlen flash attention and the predictor's one-kernel attention (bf16)
    against the plain fp32 CPU code on the same weights: prefill logits, then a decode token and both predictor
    windows."""
    cuda = Qwen3TTSLM.from_config(small_config(), device="cuda", dtype=torch.bfloat16, seed=0)
    with torch.device("meta"):
        cpu = Qwen3TTSLM(small_config(), cuda.tokenizer)
    cpu.load_state_dict({k: v.float().cpu() for k, v in cuda.state_dict().items()}, assign=True)
    for lm in (cuda, cpu):
        lm.allocate_slots(4, 64)
        for slot, text in zip([2, 0], TEXTS):
            lm.prefill(slot, lm.encode_prompt(text, None))
    assert cuda._memory.kv.is_varlen and cuda.talker.model.layers[0].self_attn.qkv is not None
    assert_close(cuda._memory.logits[[2, 0]], cpu._memory.logits[[2, 0]])
    x = torch.randn(2, 1, cpu.config.talker.hidden_size)
    positions = [[cpu._states[2].position], [cpu._states[0].position]]
    outs = [lm.talker(x.to(lm.device, lm.talker.codec_head.weight.dtype), torch.tensor([2, 0], device=lm.device),
                      torch.tensor(positions, device=lm.device), lm._memory.kv) for lm in (cuda, cpu)]
    assert_close(*outs)
    y = torch.randn(2, 3, cpu.config.talker.hidden_size)
    with torch.no_grad():  # as the engine decodes: the predictor's one-kernel attention is inference only
        outs = [predictor_windows(lm, y) for lm in (cuda, cpu)]
    assert cuda.talker.code_predictor.model.layers[0].self_attn.short_cache_keys == 16
    assert_close(outs[0][0], outs[1][0])
    assert_close(outs[0][1], outs[1][1])


def predictor_windows(lm: Qwen3TTSLM, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    predictor, cache = lm.talker.code_predictor, lm._memory.predictor_kv
    y = y.to(lm.device, lm.talker.codec_head.weight.dtype)
    frame = predictor.frame_step(y.shape[0], cache, lm.device, y.dtype)
    return predictor(y[:, :2], frame.window(0, 2), cache), predictor(y[:, 2:], frame.window(2, 3), cache)


@needs_cuda
@pytest.mark.parametrize("mix", sorted(MIXES))
def test_compiled_graphs_give_the_tokens_of_the_uncompiled_eager_frame(mix):
    """Inductor's fused layers and sampler inside the graphs against the plain eager ops (fp32: the
    fusion changes only rounding, far below what would move a token)."""
    compiled = Qwen3TTSLM.from_config(small_config(), device="cuda", dtype=torch.float32, seed=0)
    plain = Qwen3TTSLM.from_config(small_config(), device="cuda", dtype=torch.float32, seed=0)
    plain.use_torch_compile, plain.use_cuda_graphs = False, False
    compiled.use_fused_frame = plain.use_fused_frame = False  # Inductor's frame (test_fused_frame.py: the fused one)
    slots, params = [1, 3, 0, 2], MIXES[mix]
    expected = decode_frames(plain, slots, params, num_frames=6, device="cuda")
    got = decode_frames(compiled, slots, params, num_frames=6, device="cuda")
    assert compiled.talker.model.layers[0]._compiled_call_impl is not None  # the compiled path ran
    assert torch.equal(got, expected)


@needs_cuda
def test_placing_a_stream_and_moving_ids_to_the_device_do_not_wait_for_it():
    """The engine admits streams while a decode step runs (its overlapped step): placing a stream's KV extent and a
    prompt's ids on their way to the device must not wait for that step (CUDA's sync debug mode raises where a
    call would; an item assignment on the device did, a quarter of the LM loop's time at 44 req/s on an H200)."""
    from backend_python.models.base import to_device
    cache = KVCache.allocate(1, 4, 8, 16, 128, torch.device("cuda"), torch.bfloat16, pool_positions=64)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        cache.place(2, 16, 20)
        rows = to_device([2, 0], torch.device("cuda"))
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert cache.row_starts[2].item() == 16 and cache.row_lengths[2].item() == 16  # capped at max_seq_len
    assert rows.tolist() == [2, 0]
