"""Helpers the CUDA-graph tests of every `SlotSpeechLM` family share: prompts, sampling mixes, decoding
a few frames on fresh slots, and the bf16-vs-fp32 closeness check."""
from __future__ import annotations

import pytest
import torch

from backend_python.models.base import DecodeBatch, SamplingParams
from backend_python.models.slots import SlotLayout, SlotSpeechLM

PLAIN = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, repetition_penalty=1.0)
TEXTS = ["Hi.", "Get the trust fund to the bank early.", "Hello world, this is a tiny test of text to speech.",
         "The quick brown fox."]
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def sampling_mixes(greedy: SamplingParams, sampled: SamplingParams) -> dict[str, list[SamplingParams]]:
    """Four rows' sampling settings: all greedy, all sampled, and a mix with PLAIN."""
    return {"greedy": [greedy] * 4, "sampled": [sampled] * 4, "mixed": [sampled, greedy, PLAIN, greedy]}


def decode_frames(lm: SlotSpeechLM, slots: list[int], params: list[SamplingParams], num_frames: int,
                  num_slots: int = 8, device: str = "cpu", pad_on_cpu: bool = False,
                  max_seq_len: int = 128, pooled: bool = False) -> torch.Tensor:
    """Fresh slots, one prompt per slot, then num_frames decode steps -> codes [B, T, K] on the CPU.

    pad_on_cpu: run the graph path's eager twin on the CPU (built by hand: allocate_slots only
    builds it on CUDA), to check the bucket padding where there is no GPU. pooled: a pooled KV cache,
    each slot's extent just its prompt and frames, placed in the pool in the reverse order of the slots
    (a gap of 3 positions between extents)."""
    prompts = [lm.encode_prompt(text, None) for text in TEXTS[:len(slots)]]
    needs = [lm.kv_positions_for(p.num_tokens, num_frames) for p in prompts]
    lm.allocate_slots(num_slots, max_seq_len, kv_positions=sum(needs) + 3 * len(slots) if pooled else None)
    if pad_on_cpu:
        lm.use_cuda_graphs = False
        lm._graphs = lm._build_graphs(SlotLayout(num_slots, max_seq_len))
    start = 0
    for slot, need in reversed(list(zip(slots, needs))) if pooled else ():
        lm.place(slot, start, need)
        start += need + 3
    for slot, prompt in zip(slots, prompts):
        lm.prefill(slot, prompt)
    generators = [torch.Generator(device=device).manual_seed(100 + row) for row in range(len(slots))]
    batch = DecodeBatch(slots=slots, sampling=params, generators=generators, ignore_eos=[True] * len(slots))
    return torch.stack([lm.decode(batch)[0].cpu() for _ in range(num_frames)], dim=1)


def assert_padded_equals_eager(lm: SlotSpeechLM, params: list[SamplingParams], num_frames: int,
                               max_seq_len: int = 128) -> None:
    """The graph path's eager twin on slots [5, 0, 2] of a bucket of 4 is the unpadded CPU frame exactly."""
    slots = [5, 0, 2]
    expected = decode_frames(lm, slots, params, num_frames=num_frames, max_seq_len=max_seq_len)
    padded = decode_frames(lm, slots, params, num_frames=num_frames, pad_on_cpu=True, max_seq_len=max_seq_len)
    assert lm.frame_graphs is not None and lm.frame_graphs.bucket_for(3) == 4
    assert torch.equal(padded, expected)
    assert len({tuple(row.flatten().tolist()) for row in expected}) == 3  # the rows really differ


def assert_graph_replay_equals_eager(cuda_lm: SlotSpeechLM, params: list[SamplingParams], num_frames: int,
                                     codebook_size: int, max_seq_len: int = 128) -> None:
    """Graph replay on slots [5, 0, 2, 7][:len(params)] equals the same padded frame run eagerly."""
    slots = [5, 0, 2, 7][:len(params)]
    cuda_lm.use_cuda_graphs = False
    eager = decode_frames(cuda_lm, slots, params, num_frames=num_frames, device="cuda", max_seq_len=max_seq_len)
    cuda_lm.use_cuda_graphs = True
    graphed = decode_frames(cuda_lm, slots, params, num_frames=num_frames, device="cuda", max_seq_len=max_seq_len)
    assert cuda_lm.frame_graphs._graphs, "no graph was captured"
    assert torch.equal(graphed, eager), f"{(graphed == eager).float().mean():.3f} of the codes are equal"
    assert 0 <= int(graphed.min()) and int(graphed.max()) < codebook_size
    assert len({tuple(row.flatten().tolist()) for row in graphed}) == len(slots)


def assert_close(fast: torch.Tensor, reference: torch.Tensor) -> None:
    fast, reference = fast.float().cpu(), reference.float().cpu()
    cosine = torch.nn.functional.cosine_similarity(fast.flatten(1), reference.flatten(1), dim=-1)
    assert cosine.min() > 0.995, cosine


def assert_pooled_equals_static(lm: SlotSpeechLM, params: list[SamplingParams], num_frames: int,
                                device: str = "cpu") -> None:
    """Slots [5, 0, 2] in a pooled KV cache (extents just large enough, out of order) decode the same
    codes as in static rows: the layout moves the keys, never what attention reads."""
    slots = [5, 0, 2][:len(params)]
    static = decode_frames(lm, slots, params, num_frames=num_frames, device=device)
    pooled = decode_frames(lm, slots, params, num_frames=num_frames, device=device, pooled=True)
    kv = lm._require_memory().kv
    assert kv.num_positions < 3 * kv.max_seq_len  # really pooled: the three extents and the scratch row only
    assert torch.equal(pooled, static), f"{(pooled == static).float().mean():.3f} of the codes are equal"
