"""The CUDA-graph decode path of CsmLM (the backbone step and the 31-step depth-decoder loop, two
graphs per batch bucket, via frame_graphs.FrameGraphs): padded buckets equal the unpadded eager
frame (CPU), graph replay equals the same frame run eagerly (CUDA), CUDA kernels match the CPU."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from backend_python.models.base import SamplingParams
from backend_python.models.csm import CsmLM, preset_config
from tests.unit.lm_graph_helpers import (TEXTS, assert_close, assert_graph_replay_equals_eager,
                                        assert_padded_equals_eager, needs_cuda, sampling_mixes)

GREEDY = SamplingParams(temperature=0.0, repetition_penalty=1.05)
SAMPLED = SamplingParams(temperature=0.9, top_k=50, top_p=0.9, repetition_penalty=1.05)
MIXES = sampling_mixes(GREEDY, SAMPLED)


@pytest.mark.parametrize("mix", sorted(MIXES))
def test_padded_bucket_frames_equal_unpadded_eager_frames_on_cpu(mix):
    assert_padded_equals_eager(CsmLM.from_config(preset_config("csm-tiny"), seed=0), MIXES[mix][:3], num_frames=4)


# ---- CUDA ------------------------------------------------------------------------------------
def small_config():
    """The CSM-1B shapes (head_dim 64 / 128, GQA 32/8 and 8/2, 2051 ids) with fewer layers."""
    cfg = preset_config("csm-1b")
    depth = replace(cfg.depth_decoder, shape=replace(cfg.depth_decoder.shape, num_hidden_layers=2))
    return replace(cfg, backbone=replace(cfg.backbone, num_hidden_layers=3), depth_decoder=depth)


@pytest.fixture(scope="module")
def cuda_lm() -> CsmLM:
    return CsmLM.from_config(small_config(), device="cuda", dtype=torch.bfloat16, seed=0)


@needs_cuda
@pytest.mark.parametrize("num_rows", [3, 4])
@pytest.mark.parametrize("mix", sorted(MIXES))
def test_graph_replay_equals_the_eager_frame(cuda_lm, mix, num_rows):
    assert_graph_replay_equals_eager(cuda_lm, MIXES[mix][:num_rows], 6, cuda_lm.config.codebook_size)


@needs_cuda
def test_cuda_kernels_match_the_cpu_reference():
    """Fused projections, fused RMSNorm and varlen flash attention (bf16) against the plain fp32 CPU
    code on the same weights: prefill logits, then a backbone decode token."""
    cuda = CsmLM.from_config(small_config(), device="cuda", dtype=torch.bfloat16, seed=0)
    with torch.device("meta"):
        cpu = CsmLM(small_config(), cuda.tokenizer)
    cpu.load_state_dict({k: v.float().cpu() for k, v in cuda.state_dict().items()}, assign=True)
    cpu.tie_codebook_embeddings()
    for lm in (cuda, cpu):
        lm.allocate_slots(4, 64)
        for slot, text in zip([2, 0], TEXTS):
            lm.prefill(slot, lm.encode_prompt(text, None))
    assert cuda._memory.kv.is_varlen and cuda.backbone_model.layers[0].self_attn.qkv is not None
    assert_close(cuda._memory.logits[[2, 0]], cpu._memory.logits[[2, 0]])
    x = torch.randn(2, 1, cpu.config.backbone.hidden_size)
    positions = [[cpu._states[2].position], [cpu._states[0].position]]
    outs = [lm.backbone_model.run(x.to(lm.device, lm.lm_head.weight.dtype), torch.tensor([2, 0], device=lm.device),
                                  torch.tensor(positions, device=lm.device), lm._memory.kv) for lm in (cuda, cpu)]
    assert_close(*outs)
