"""The CUDA-graph decode path of OrpheusLM: padded buckets equal the unpadded eager frame (CPU),
graph replay equals the same frame run eagerly (CUDA), and the bf16 CUDA kernels track the fp32
CPU reference."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from backend_python.models.base import DecodeBatch, SamplingParams
from backend_python.models.orpheus import OrpheusLM, preset_config
from backend_python.models.orpheus.frames import CODES_PER_SLOT

GREEDY = SamplingParams(temperature=0.0, repetition_penalty=1.1)
SAMPLED = SamplingParams(temperature=0.6, top_k=50, top_p=0.8, repetition_penalty=1.3)
PLAIN = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, repetition_penalty=1.0)
TEXTS = ["Hi.", "Get the trust fund to the bank early.", "Hello world, this is a tiny test of text to speech.",
         "The quick brown fox."]
MIXES = {"greedy": [GREEDY] * 4, "sampled": [SAMPLED] * 4, "mixed": [SAMPLED, GREEDY, PLAIN, GREEDY]}
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def decode_frames(lm: OrpheusLM, slots: list[int], params: list[SamplingParams], num_frames: int,
                  num_slots: int = 8, device: str = "cpu", pad_on_cpu: bool = False) -> torch.Tensor:
    """Fresh slots, one prompt per slot, then num_frames decode steps -> codes [B, T, 7] on the CPU.

    pad_on_cpu: run the graph path's eager twin on the CPU (allocate_slots only builds it on CUDA)."""
    lm.allocate_slots(num_slots, 64)
    if pad_on_cpu:
        lm.use_cuda_graphs = False
        lm._graphs = lm._build_graphs(num_slots)
    for slot, text in zip(slots, TEXTS):
        lm.prefill(slot, lm.encode_prompt(text, None))
    generators = [torch.Generator(device=device).manual_seed(100 + row) for row in range(len(slots))]
    batch = DecodeBatch(slots=slots, sampling=params, generators=generators, ignore_eos=[True] * len(slots))
    return torch.stack([lm.decode(batch)[0].cpu() for _ in range(num_frames)], dim=1)


@pytest.mark.parametrize("mix", sorted(MIXES))
def test_padded_bucket_frames_equal_unpadded_eager_frames_on_cpu(mix):
    """The graph path's eager twin (padding rows on the scratch row, the whole cache, all sampling
    steps on) is the CPU frame exactly: padding never leaks into live rows."""
    lm = OrpheusLM.from_config(preset_config("orpheus-tiny"), seed=0)
    slots, params = [5, 0, 2], MIXES[mix][:3]
    expected = decode_frames(lm, slots, params, num_frames=4)
    padded = decode_frames(lm, slots, params, num_frames=4, pad_on_cpu=True)
    assert lm.frame_graphs is not None and lm.frame_graphs.bucket_for(3) == 4
    assert torch.equal(padded, expected)
    assert len({tuple(row.flatten().tolist()) for row in expected}) == 3  # the rows really differ


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
    slots, params = [5, 0, 2, 7][:num_rows], MIXES[mix][:num_rows]
    cuda_lm.use_cuda_graphs = False
    eager = decode_frames(cuda_lm, slots, params, num_frames=5, device="cuda")
    cuda_lm.use_cuda_graphs = True
    graphed = decode_frames(cuda_lm, slots, params, num_frames=5, device="cuda")
    assert cuda_lm.frame_graphs._graphs, "no graph was captured"
    assert torch.equal(graphed, eager), f"{(graphed == eager).float().mean():.3f} of the codes are equal"
    assert 0 <= int(graphed.min()) and int(graphed.max()) < CODES_PER_SLOT
    assert len({tuple(row.flatten().tolist()) for row in graphed}) == num_rows


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


def assert_close(fast: torch.Tensor, reference: torch.Tensor) -> None:
    fast, reference = fast.float().cpu(), reference.float().cpu()
    cosine = torch.nn.functional.cosine_similarity(fast.flatten(1), reference.flatten(1), dim=-1)
    assert cosine.min() > 0.995, cosine
