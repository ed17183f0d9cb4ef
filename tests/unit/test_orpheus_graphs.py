"""The CUDA-graph decode path of OrpheusLM: padded buckets equal the unpadded eager frame (CPU),
graph replay equals the same frame run eagerly (CUDA), and the bf16 CUDA kernels track the fp32
CPU reference."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from backend_python.models.base import SamplingParams
from backend_python.models.orpheus import OrpheusLM, preset_config
from backend_python.models.orpheus.frames import CODES_PER_SLOT
from tests.unit.lm_graph_helpers import (TEXTS, assert_close, assert_graph_replay_equals_eager,
                                        assert_padded_equals_eager, needs_cuda, sampling_mixes)

GREEDY = SamplingParams(temperature=0.0, repetition_penalty=1.1)
SAMPLED = SamplingParams(temperature=0.6, top_k=50, top_p=0.8, repetition_penalty=1.3)
MIXES = sampling_mixes(GREEDY, SAMPLED)
MAX_SEQ_LEN = 64  # frames of 7 positions


@pytest.mark.parametrize("mix", sorted(MIXES))
def test_padded_bucket_frames_equal_unpadded_eager_frames_on_cpu(mix):
    """The graph path's eager twin (padding rows on the scratch row, the whole cache, all sampling
    steps on) is the CPU frame exactly: padding never leaks into live rows."""
    lm = OrpheusLM.from_config(preset_config("orpheus-tiny"), seed=0)
    assert_padded_equals_eager(lm, MIXES[mix][:3], num_frames=4, max_seq_len=MAX_SEQ_LEN)


# ---- CUDA ------------------------------------------------------------------------------------
def small_config():
    """The 3B shapes (hidden 3072, head_dim 128, GQA 24/8, full vocabulary) with 2 layers."""
    return replace(preset_config("orpheus-3b"), num_hidden_layers=2)


@pytest.fixture(scope="module")
def cuda_lm() -> OrpheusLM:
    return OrpheusLM.from_config(small_config(), device="cuda", dtype=torch.bfloat16, seed=0)


@needs_cuda
@pytest.mark.parametrize("num_rows", [3, 4])
@pytest.mark.parametrize("mix", sorted(MIXES))
def test_graph_replay_equals_the_eager_frame(cuda_lm, mix, num_rows):
    assert_graph_replay_equals_eager(cuda_lm, MIXES[mix][:num_rows], 5, CODES_PER_SLOT, max_seq_len=MAX_SEQ_LEN)


@needs_cuda
def test_cuda_kernels_match_the_cpu_reference():
    """Fused projections, fused RMSNorm and varlen flash attention (bf16) against the plain fp32 CPU
    code on the same weights: the slots' hidden states after prefill and after one frame."""
    cuda = OrpheusLM.from_config(small_config(), device="cuda", dtype=torch.bfloat16, seed=0)
    with torch.device("meta"):
        cpu = OrpheusLM(small_config(), cuda.tokenizer)
    cpu.load_state_dict({k: v.float().cpu() for k, v in cuda.state_dict().items()}, assign=True)
    hidden = []
    for lm in (cuda, cpu):
        lm.allocate_slots(4, 64)
        for slot, text in zip([2, 0], TEXTS):
            lm.prefill(slot, lm.encode_prompt(text, None))
        hidden.append(lm._memory.hidden[[2, 0]].clone())
    assert cuda._memory.kv.is_varlen and cuda.backbone.model.layers[0].self_attn.qkv is not None
    assert_close(*hidden)
    codes = torch.tensor([[1, 2, 3, 4, 5, 6, 7], [4095, 0, 17, 4000, 9, 8, 1]])
    tokens = (codes + torch.tensor([128266 + k * 4096 for k in range(7)]))[:, :1]  # slot 0 of the next frame
    outs = [lm.backbone(tokens.to(lm.device), torch.tensor([2, 0], device=lm.device),
                        torch.tensor([[lm._states[2].position], [lm._states[0].position]], device=lm.device),
                        lm._memory.kv) for lm in (cuda, cpu)]
    assert_close(*outs)
