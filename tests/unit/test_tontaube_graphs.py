"""TontaubeV1's semantic model on the shared slot machinery (tests/unit/lm_graph_helpers.py): the CUDA graph path's
padded frame (its eager twin on the CPU) decodes the unpadded frame's codes exactly, a pooled KV cache the static
rows' codes; on CUDA the graph replay equals the same frame run eagerly, and its refiners give the CPU's codes."""
from __future__ import annotations

import pytest

from backend_python.models.base import SamplingParams
from backend_python.models.tontaube.cascade import VoicePrompt
from backend_python.models.tontaube.config import SEMANTIC_CODES
from backend_python.models.tontaube.lm import TontaubeLM
from backend_python.models.tontaube.presets import tiny
from backend_python.models.tontaube.refine_context import encode_refine_context
from backend_python.models.tontaube.refiner import RefineRequest
from backend_python.models.tontaube.text import TextTokenizer, tiny_tokenizer
from tests.unit.lm_graph_helpers import (PLAIN, assert_graph_replay_equals_eager, assert_padded_equals_eager,
                                         assert_pooled_equals_static, needs_cuda, sampling_mixes)

GREEDY = SamplingParams(temperature=0.0, top_k=0, top_p=1.0, repetition_penalty=1.0)
SAMPLED = SamplingParams(temperature=0.9, top_k=50, top_p=0.95, repetition_penalty=1.1)
VOICE = VoicePrompt(tuple(tuple(range(5 * k, 5 * k + 4)) for k in range(4)))


def make_lm(device: str = "cpu") -> TontaubeLM:
    return TontaubeLM.from_config(tiny(), TextTokenizer(tiny_tokenizer()), {"tiny": VOICE}, device=device, seed=2)


@pytest.mark.parametrize("mix", ["greedy", "sampled", "mixed"])
def test_the_padded_graph_frame_decodes_the_unpadded_frame_s_codes(mix):
    assert_padded_equals_eager(make_lm(), sampling_mixes(GREEDY, SAMPLED)[mix][:3], num_frames=5)


def test_a_pooled_cache_decodes_the_static_rows_codes():
    assert_pooled_equals_static(make_lm(), [GREEDY, SAMPLED, PLAIN], num_frames=5)


@needs_cuda
@pytest.mark.parametrize("mix", ["greedy", "mixed"])
def test_graph_replay_equals_the_eager_frame_on_cuda(mix):
    assert_graph_replay_equals_eager(make_lm("cuda"), sampling_mixes(GREEDY, SAMPLED)[mix], num_frames=6,
                                     codebook_size=SEMANTIC_CODES + 1)


@needs_cuda
def test_the_refiners_on_cuda_give_the_cpu_s_codes():
    from backend_python.models import registry
    spec = registry.resolve("tontaube-tiny")
    cpu, cuda = (registry.load_refiner(spec, device, "float32") for device in ("cpu", "cuda"))
    context = encode_refine_context([72, 105, 46], VOICE, 300)
    requests = [RefineRequest([1, 2, 3, 4, 5, 6], [], context), RefineRequest([9, 8, 7], [[1, 2, 3]], context)]
    assert [c.tolist() for c in cuda.refine(requests)] == [c.tolist() for c in cpu.refine(requests)]
