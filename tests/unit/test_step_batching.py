"""A step of N live streams is one batched call of each stage, for every family (issue 52): the decode step (the
backbone and its per-frame head: code predictor, depth decoder, flow head, MTP blocks), a cascade's refiners, and
the codec's windows. Checked on the CPU by what the step does, not by its time: every module is called as often
for 8 streams as for 1 (a per-stream loop calls some module 8 times), and the aten ops the profiler records grow
far less than 8x (a per-stream loop of tensor ops, a host read per row, grows them with the streams)."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable

import pytest
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

from backend_python.models import registry
from backend_python.models.base import Codec, DecodeBatch, Prompt, SamplingParams, SpeechLM, VoiceReference
from backend_python.models.tontaube.refiner import RefineRequest, TontaubeRefiner
from tests.unit.lm_graph_helpers import TEXTS

PRESETS = ("qwen3-tts-tiny", "csm-tiny", "orpheus-tiny", "cosyvoice3-tiny", "flashtts-tiny", "higgs-v3-tiny",
           "zonos-tiny", "voxtral-tiny", "tse-tiny", "tontaube-tiny")
NUM_STREAMS = 8
# ops of a step of 8 streams over a step of 1: what a batch may add per row is a noise draw from each stream's own
# generator and its host-side columns (measured 1.00-1.07); a per-row loop over a stage is ~8x
MAX_OP_GROWTH = 1.5
SAMPLED = SamplingParams(temperature=0.9, top_k=50, top_p=0.9)


@dataclass
class Work:
    """What one call did: each module's forward calls by name, and the aten ops recorded (nested ones too)."""

    calls: Counter
    num_ops: int


def measure(model: nn.Module, run: Callable[[], object]) -> Work:
    calls: Counter = Counter()
    hooks = [module.register_forward_pre_hook(lambda _m, _a, name=name: calls.update([name]))
             for name, module in model.named_modules() if name]
    try:
        with torch.inference_mode(), profile(activities=[ProfilerActivity.CPU]) as profiler:
            run()
    finally:
        for hook in hooks:
            hook.remove()
    return Work(calls, sum(event.name.startswith("aten::") for event in profiler.events()))


def assert_batched(one: Work, many: Work) -> None:
    assert one.calls, "the stage ran no module"
    grown = {name: (one.calls[name], many.calls[name]) for name in one.calls | many.calls
             if one.calls[name] != many.calls[name]}
    assert not grown, f"modules called per stream (calls for 1 and {NUM_STREAMS} streams): {grown}"
    assert many.num_ops <= MAX_OP_GROWTH * one.num_ops, \
        f"{NUM_STREAMS} streams took {many.num_ops} ops, 1 stream {one.num_ops}"


@pytest.fixture(scope="module", params=PRESETS)
def preset(request) -> str:
    if request.param.startswith("orpheus"):
        pytest.importorskip("snac")  # its tiny checkpoint is built with the SNAC codec
    return request.param


@pytest.fixture(scope="module")
def spec(preset) -> registry.ModelSpec:
    return registry.resolve(preset)


# ---- the decode step ---------------------------------------------------------------------------------------------
def prompt(lm: SpeechLM, row: int) -> Prompt:
    """Row `row`'s prompt; an interleaved model's (tse) with two input chunks already there."""
    if not lm.takes_input:
        return lm.encode_prompt(TEXTS[row % len(TEXTS)], None)
    speaker = torch.randn(lm.config.speaker_dim, generator=torch.Generator().manual_seed(row))
    listening = lm.open_input(VoiceReference({"speaker_embedding": speaker}))
    listening.input.append(torch.randint(0, lm.config.codebook_size, (2 * lm.input_chunk_frames, lm.num_codebooks),
                                         generator=torch.Generator().manual_seed(row)))
    return listening


def decode_batch(num_rows: int, device: torch.device | str = "cpu") -> DecodeBatch:
    """Rows 0..num_rows-1, sampled, each with its generator on `device` (a CUDA frame draws its noise there)."""
    return DecodeBatch(slots=list(range(num_rows)), sampling=[SAMPLED] * num_rows,
                       generators=[torch.Generator(device=device).manual_seed(row) for row in range(num_rows)],
                       ignore_eos=[True] * num_rows)


def decode_work(spec: registry.ModelSpec) -> tuple[Work, Work]:
    """A decode step of 1 stream and of NUM_STREAMS (tools/step_ops.py prints them)."""
    lm = registry.load_lm(spec, "cpu", "float32")
    lm.allocate_slots(NUM_STREAMS, 256)
    for row in range(NUM_STREAMS):
        lm.prefill(row, prompt(lm, row))
    lm.decode(decode_batch(NUM_STREAMS))  # past the first step's one-off work (a delayed family's empty rows)
    return measure(lm, lambda: lm.decode(decode_batch(1))), measure(lm, lambda: lm.decode(decode_batch(NUM_STREAMS)))


def test_a_decode_step_of_8_streams_is_one_batched_call_of_each_stage(spec):
    assert_batched(*decode_work(spec))


# ---- the codec's windows -----------------------------------------------------------------------------------------
def windows(codec: Codec, num_rows: int) -> list[tuple[torch.Tensor, int]]:
    """A step's chunks of `num_rows` streams: full left context, the lookahead, 2-4 new frames. A causal codec gets
    windows of several lengths (right padding is exact there); a non-causal one decodes one batch per length by
    design (padding would reach a window's audio), so its windows are of one length."""
    generator = torch.Generator().manual_seed(0)
    out = []
    for row in range(num_rows):
        new = 2 + row % 3 if codec.lookahead_frames == 0 else 2
        length = codec.left_context_frames + new + codec.lookahead_frames
        codes = torch.randint(0, min(codec.codebook_size, 16), (length, codec.num_codebooks), generator=generator)
        out.append((codes, codec.left_context_frames))
    return out


def decode_windows(codec: Codec, num_rows: int) -> Callable[[], object]:
    batch = windows(codec, num_rows)
    if codec.uses_stream_position:  # a flow's noise and a vocoder's frames laid out by the windows' stream places
        return lambda: codec.decode_windows(batch, start_frames=[context for _, context in batch])
    return lambda: codec.decode_windows(batch)


def codec_work(spec: registry.ModelSpec) -> tuple[Work, Work]:
    """A codec call on the windows of 1 stream and of NUM_STREAMS."""
    codec = registry.load_codec(spec, "cpu", "float32")
    decode_windows(codec, NUM_STREAMS)()  # lazy set-up (windows of a shape, tables) is not the step's work
    return measure(codec, decode_windows(codec, 1)), measure(codec, decode_windows(codec, NUM_STREAMS))


def test_a_codec_call_decodes_8_streams_windows_in_one_batch(spec):
    assert_batched(*codec_work(spec))


# ---- a cascade's refiners ----------------------------------------------------------------------------------------
def refine_requests(refiner: TontaubeRefiner, lm: SpeechLM, num_rows: int) -> list[RefineRequest]:
    """Each stream's first chunk: 5 semantic codes, nothing refined yet, its own text and the preset voice."""
    generator = torch.Generator().manual_seed(1)
    return [refiner.request(torch.randint(0, 1000, (5,), generator=generator).numpy(),
                            torch.zeros(0, refiner.width, dtype=torch.long).numpy(),
                            lm.refine_context(lm.encode_prompt(TEXTS[row % len(TEXTS)], None)).numpy())
            for row in range(num_rows)]


def refiner_work(spec: registry.ModelSpec) -> tuple[Work, Work]:
    """A cascade's refinement of the first chunks of 1 stream and of NUM_STREAMS."""
    refiner, lm = registry.load_refiner(spec, "cpu", "float32"), registry.load_lm(spec, "cpu", "float32")
    models = nn.ModuleList(refiner.refiners)
    one, many = refine_requests(refiner, lm, 1), refine_requests(refiner, lm, NUM_STREAMS)
    return measure(models, lambda: refiner.refine(one)), measure(models, lambda: refiner.refine(many))


def test_the_refiners_refine_8_streams_chunks_in_one_batch():
    assert_batched(*refiner_work(registry.resolve("tontaube-tiny")))
