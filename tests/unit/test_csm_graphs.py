"""The CUDA-graph decode path of CsmLM (the backbone step and the 31-step depth-decoder loop, two
graphs per batch bucket, via qwen3_tts.graphs.FrameGraphs): padded buckets equal the unpadded eager
frame (CPU), graph replay equals the same frame run eagerly (CUDA), CUDA kernels match the CPU."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from backend_python.models.base import DecodeBatch, SamplingParams
from backend_python.models.csm import CsmLM, preset_config

GREEDY = SamplingParams(temperature=0.0, repetition_penalty=1.05)
SAMPLED = SamplingParams(temperature=0.9, top_k=50, top_p=0.9, repetition_penalty=1.05)
PLAIN = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, repetition_penalty=1.0)
TEXTS = ["Hi.", "Get the trust fund to the bank early.", "Hello world, this is a tiny test of text to speech.",
         "The quick brown fox."]
MIXES = {"greedy": [GREEDY] * 4, "sampled": [SAMPLED] * 4, "mixed": [SAMPLED, GREEDY, PLAIN, GREEDY]}
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def decode_frames(lm: CsmLM, slots: list[int], params: list[SamplingParams], num_frames: int,
                  num_slots: int = 8, device: str = "cpu", pad_on_cpu: bool = False) -> torch.Tensor:
    """Fresh slots, one prompt per slot, then num_frames decode steps -> codes [B, T, 32] on the CPU.

    pad_on_cpu: run the graph path's eager twin on the CPU (allocate_slots builds it only on CUDA)."""
    lm.allocate_slots(num_slots, 128)
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
    lm = CsmLM.from_config(preset_config("csm-tiny"), seed=0)
    slots, params = [5, 0, 2], MIXES[mix][:3]
    expected = decode_frames(lm, slots, params, num_frames=4)
    padded = decode_frames(lm, slots, params, num_frames=4, pad_on_cpu=True)
    assert lm.frame_graphs is not None and lm.frame_graphs.bucket_for(3) == 4
    assert torch.equal(padded, expected)
    assert len({tuple(row.flatten().tolist()) for row in expected}) == 3  # the rows really differ


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
    slots, params = [5, 0, 2, 7][:num_rows], MIXES[mix][:num_rows]
    cuda_lm.use_cuda_graphs = False
    eager = decode_frames(cuda_lm, slots, params, num_frames=6, device="cuda")
    cuda_lm.use_cuda_graphs = True
    graphed = decode_frames(cuda_lm, slots, params, num_frames=6, device="cuda")
    assert cuda_lm.frame_graphs._graphs, "no graph was captured"
    assert torch.equal(graphed, eager), f"{(graphed == eager).float().mean():.3f} of the tokens are equal"
    assert 0 <= int(graphed.min()) and int(graphed.max()) < cuda_lm.config.codebook_size
    assert len({tuple(row.flatten().tolist()) for row in graphed}) == num_rows


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


def assert_close(fast: torch.Tensor, reference: torch.Tensor) -> None:
    fast, reference = fast.float().cpu(), reference.float().cpu()
    cosine = torch.nn.functional.cosine_similarity(fast.flatten(1), reference.flatten(1), dim=-1)
    assert cosine.min() > 0.995, cosine
