"""ZonosLM against Zyphra's reference Zonos (transformer backbone, prefix conditioner, embeddings and heads) on tiny
random weights: tests/fixtures/zonos_golden.pt, made by tools/make_zonos_fixture.py from a checkout of the
reference, with its weights drawn by the tool's recipe and loaded here by the official names.

Checked: the conditional and unconditional prefixes, the guided logits of the first steps, every delayed row the
reference fed back with greedy decoding (repetition penalty off, and at the reference's 3.0), the end of speech on
codebook 0 and the countdown that closes codebooks 1..8; and through the real engine, the assembled frames equal
the reference's reverted codes and the stream ends with them."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from backend_python.engine.engine import EngineConfig, LMEngine
from backend_python.engine.sequence import Sequence
from backend_python.models.base import DecodeBatch, SamplingParams
from backend_python.models.zonos.config import ZonosConfig
from backend_python.models.zonos.lm import ZonosLM
from scheduler import AdmissionPolicyName, ChunkingConfig, SchedulerConfig
from tests.golden import assert_float32_close, num_layers
from tests.unit.test_engine import ListSink
from tools.make_zonos_fixture import EOS_ROW, draw_weights

FIXTURE = Path(__file__).parents[1] / "fixtures" / "zonos_golden.pt"
MASKED, EOS = 1025, 1024
PENALTIES = ["1.0", "3.0"]


@pytest.fixture(scope="module")
def golden() -> dict:
    return torch.load(FIXTURE, weights_only=False)


@pytest.fixture(scope="module")
def lm(golden) -> ZonosLM:
    weights = draw_weights(golden["shapes"], golden["seed"])
    weights[EOS_ROW][EOS] = golden["eos_row"]
    with torch.device("meta"):
        model = ZonosLM(ZonosConfig.from_dict(golden["config"]), {"reference": golden["speaker"]})
    model.load_state_dict(weights, strict=True, assign=True)  # every official name, nothing else
    return model.eval()


def greedy(penalty: str) -> SamplingParams:
    return SamplingParams(temperature=0.0, repetition_penalty=float(penalty))


def decode_rows(lm: ZonosLM, golden: dict, penalty: str, num_steps: int) -> tuple[list, list, list]:
    """Our rows, is_eos flags and guided logits for the reference's text and speaker, stepping one slot."""
    lm.allocate_slots(2, 128)
    lm.prefill(1, lm.encode_prompt(golden["text"], "reference"))
    logits, guided = [], lm.guided_logits
    lm.guided_logits = lambda *args: logits.append(guided(*args)[0]) or logits[-1][None]
    try:
        batch = DecodeBatch([1], [greedy(penalty)], [torch.Generator()], [False])
        steps = [lm.decode(batch) for _ in range(num_steps)]
    finally:
        del lm.guided_logits
    return [codes[0] for codes, _ in steps], [bool(eos[0]) for _, eos in steps], logits


def test_the_prefixes_match_the_reference(lm, golden):
    prompt = lm.encode_prompt(golden["text"], "reference")
    ours = lm.prefixes(prompt)
    assert_float32_close(ours, golden["runs"]["1.0"]["prefix"], num_layers(lm.prefix_conditioner))
    assert prompt.num_tokens == ours.shape[1]


def test_the_default_voice_is_the_unconditional_speaker(lm, golden):
    prompt = lm.encode_prompt(golden["text"], "reference")
    default = lm.prefixes(lm.encode_prompt(golden["text"], None))
    torch.testing.assert_close(default[1], lm.prefixes(prompt)[1], rtol=0, atol=0)  # the speaker is no part of it
    speaker = prompt.tensors["espeak"].shape[0]  # the position after the phonemes
    # LayerNorm is per position: the phonemes and the speaker's position equal the unconditional prefix's, the
    # emotion, fmax, pitch, rate and language positions keep their conditions
    torch.testing.assert_close(default[0, :speaker + 1], default[1, :speaker + 1], rtol=0, atol=0)
    assert (default[0, speaker + 1:] - default[1, speaker + 1:]).abs().amax(dim=1).min() > 0.1


@pytest.mark.parametrize("penalty", PENALTIES)
def test_greedy_rows_match_the_reference_to_the_end_of_speech(lm, golden, penalty):
    run = golden["runs"][penalty]
    expected = torch.cat((torch.tensor([[run["codes"][0, 0]] + [MASKED] * 8]), run["rows"]))  # step 0, then 1..
    rows, is_eos, logits = decode_rows(lm, golden, penalty, len(expected))
    for step, (ours, theirs) in enumerate(zip(rows, expected)):
        assert ours.tolist() == theirs.tolist(), f"step {step}"
    # the prefix, the backbone and the heads (the model's every layer)
    assert_float32_close(torch.stack(logits[:len(run["logits"])]), run["logits"], num_layers(lm))
    end = len(run["codes"])  # codebook 0 ends at the step of the first frame that does not exist
    assert is_eos == [False] * end + [True] * (len(expected) - end)
    assert rows[-1].tolist() == [MASKED] * 8 + [EOS]  # the reference's last step: codebook 8 closes


@pytest.mark.parametrize("penalty", PENALTIES)
def test_the_engine_assembles_the_reference_frames_and_ends_the_stream(lm, golden, penalty):
    run = golden["runs"][penalty]
    chunking = ChunkingConfig(first_chunk_frames=3, chunk_frames=7, chunk_growth=None)
    engine = LMEngine(lm, EngineConfig(max_slots=2, max_seq_len=128, codec_left_context_frames=2,
                                       num_delay_steps=lm.num_delay_steps, overlap_steps=False,
                                       scheduler=SchedulerConfig(chunking=chunking,
                                                                 admission_policy=AdmissionPolicyName.PREFILL_FIRST)))
    sink = ListSink()
    engine.add(Sequence(request_id="golden", prompt=lm.encode_prompt(golden["text"], "reference"),
                        sampling=greedy(penalty), ignore_eos=False, max_frames=60, sink=sink,
                        generator=torch.Generator()))
    for _ in range(200):
        engine._collect(0)
        engine.step()
        if sink.done.is_set():
            break
    assert sink.error is None and sink.chunks and sink.chunks[-1].is_last
    frames = torch.cat([c.tokens[c.context_frames:] for c in sink.chunks])
    assert frames.tolist() == run["codes"].tolist()
