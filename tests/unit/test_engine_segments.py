"""Streamed text for CSM and Orpheus in the LM's loop (engine/segments.py), tiny random weights, CPU: the text is
spoken segment by segment in the request's slot, the stream's chunks run on across segments, the frames
depend on the text alone (not on its pieces, their pace or the overlapped step), CSM hears the segment before
as context, and a segment ends at the model's end of speech or its limit."""
from __future__ import annotations

import pytest
import torch

from backend_python.engine.engine import EngineConfig, LMEngine
from backend_python.engine.sequence import Sequence
from backend_python.models.base import SamplingParams
from backend_python.models.csm import CsmLM
from backend_python.models.csm import preset_config as csm_config
from backend_python.models.orpheus import OrpheusLM
from backend_python.models.orpheus import preset_config as orpheus_config
from backend_python.models.text_segments import SegmentedText, SegmentRules
from scheduler import AdmissionPolicyName, ChunkingConfig, SchedulerConfig
from tests.unit.test_engine import ListSink

TEXT = "Get the trust fund to the bank early. Then wait for it."
FIRST = "Get the trust fund to the bank early."
RULES = SegmentRules(chars_per_s=60.0)  # short budgets: 37 characters are 8 frames at 12.5 Hz
MAX_FRAMES = 20


@pytest.fixture(scope="module", params=["csm", "orpheus"])
def lm(request):
    if request.param == "csm":
        return CsmLM.from_config(csm_config("csm-tiny"), seed=0)
    return OrpheusLM.from_config(orpheus_config("orpheus-tiny"), seed=4)


def make_engine(lm, overlap: bool = False) -> LMEngine:
    chunking = ChunkingConfig(first_chunk_frames=2, chunk_frames=4, chunk_growth=None)
    return LMEngine(lm, EngineConfig(max_slots=3, max_seq_len=256, codec_left_context_frames=2, overlap_steps=overlap,
                                     overlap_min_rows=1,
                                     scheduler=SchedulerConfig(chunking=chunking,
                                                               admission_policy=AdmissionPolicyName.PREFILL_FIRST)))


def session(lm, name: str, ignore_eos: bool = True) -> tuple[Sequence, ListSink]:
    sink = ListSink()
    feed = SegmentedText(lambda text, context: lm.encode_segment(text, None, context), lm.frame_rate, RULES)
    return Sequence(request_id=name, prompt=None, sampling=SamplingParams(), ignore_eos=ignore_eos,
                    max_frames=MAX_FRAMES, sink=sink, generator=torch.Generator().manual_seed(3), text=feed), sink


def steps(engine: LMEngine, n: int) -> None:
    for _ in range(n):
        engine._collect(0)
        engine.step()


def frames_of(sink: ListSink) -> torch.Tensor:
    return torch.cat([c.tokens[c.context_frames:] for c in sink.chunks])


def speak(lm, pieces: list[str], steps_per_piece: int, overlap: bool = False, ignore_eos: bool = True) -> ListSink:
    engine = make_engine(lm, overlap)
    seq, sink = session(lm, "s", ignore_eos)
    engine.add(seq)
    for piece in pieces:
        engine.add_text("s", piece, is_final=False)
        steps(engine, steps_per_piece)
    engine.add_text("s", "", is_final=True)
    steps(engine, 3 * MAX_FRAMES)
    assert sink.done.is_set() and sink.error is None
    return sink


def assert_one_stream(sink: ListSink) -> None:
    """Chunks 0, 1, 2, … whose frames follow each other, the last one marked last; left context from the
    stream's own frames, also across a segment's start."""
    assert [c.chunk_index for c in sink.chunks] == list(range(len(sink.chunks)))
    starts = [c.start_frame for c in sink.chunks]
    assert starts == [sum(c.num_new_frames for c in sink.chunks[:i]) for i in range(len(sink.chunks))]
    assert [c.is_last for c in sink.chunks] == [False] * (len(sink.chunks) - 1) + [True]
    frames = frames_of(sink)
    for chunk in sink.chunks:
        torch.testing.assert_close(chunk.tokens[:chunk.context_frames],
                                   frames[chunk.start_frame - chunk.context_frames: chunk.start_frame])


def test_the_frames_depend_on_the_text_not_on_its_pieces_or_their_pace(lm):
    at_once = speak(lm, [TEXT], steps_per_piece=1)
    words = TEXT.split(" ")
    slowly = speak(lm, [words[0]] + [" " + w for w in words[1:]], steps_per_piece=6)
    overlapped = speak(lm, list(TEXT), steps_per_piece=1, overlap=True)
    assert_one_stream(at_once)
    assert frames_of(at_once).shape[0] == MAX_FRAMES  # ignore_eos: the last segment runs to max_frames
    assert torch.equal(frames_of(slowly), frames_of(at_once))
    assert torch.equal(frames_of(overlapped), frames_of(at_once))


def test_the_first_segment_speaks_as_a_request_of_its_text_alone_and_before_the_text_is_closed(lm):
    engine = make_engine(lm)
    seq, sink = session(lm, "s")
    engine.add(seq)
    engine.add_text("s", TEXT, is_final=False)  # the first sentence is complete; the second is open
    steps(engine, 30)
    budget = RULES.budget_frames(FIRST, lm.frame_rate)
    assert not sink.done.is_set()
    assert sum(c.num_new_frames for c in sink.chunks) == budget  # spoken, then it waits: is it the last?
    alone = Sequence(request_id="alone", prompt=lm.encode_prompt(FIRST, None), sampling=SamplingParams(),
                     ignore_eos=True, max_frames=budget, sink=ListSink(), generator=torch.Generator().manual_seed(3))
    engine.add(alone)
    steps(engine, budget + 3)
    assert torch.equal(frames_of(sink), frames_of(alone.sink))


def test_a_session_waiting_for_its_text_keeps_its_slot_and_others_go_on(lm):
    engine = make_engine(lm)
    seq, sink = session(lm, "s")
    engine.add(seq)
    engine.add_text("s", "Get the trust", is_final=False)
    other = Sequence(request_id="other", prompt=lm.encode_prompt(FIRST, None), sampling=SamplingParams(),
                     ignore_eos=True, max_frames=6, sink=ListSink(), generator=torch.Generator().manual_seed(1))
    engine.add(other)
    steps(engine, 12)
    assert other.sink.done.is_set() and other.sink.error is None
    assert sink.chunks == [] and not sink.done.is_set()


def test_csm_hears_the_segment_before_as_context_and_orpheus_its_voice_alone(lm, monkeypatch):
    prompts = []
    prefill = lm.prefill_batch
    monkeypatch.setattr(lm, "prefill_batch", lambda slots, batch: prompts.extend(batch) or prefill(slots, batch))
    sink = speak(lm, [TEXT], steps_per_piece=1)
    budget = RULES.budget_frames(FIRST, lm.frame_rate)
    assert len(prompts) == 2
    second_alone = lm.encode_prompt("Then wait for it.", None)
    if isinstance(lm, CsmLM):
        assert torch.equal(prompts[1].tensors["context_codes"], frames_of(sink)[:budget])
        context_text = lm.encode_prompt(FIRST, None)
        assert prompts[1].num_tokens == context_text.num_tokens + budget + 1 + second_alone.num_tokens
    else:
        assert torch.equal(prompts[1].tensors["input_ids"], second_alone.tensors["input_ids"])


@pytest.mark.parametrize("overlap", [False, True], ids=["plain", "overlapped"])
def test_an_end_of_speech_ends_a_segment_and_a_close_with_nothing_left_ends_the_stream(lm, monkeypatch, overlap):
    if not isinstance(lm, CsmLM):
        pytest.skip("random Orpheus weights may end speech by themselves; CSM's all-zero end frame never comes")
    force_end_of_speech(lm, monkeypatch, at_frame=5)
    engine = make_engine(lm, overlap)
    seq, sink = session(lm, "s", ignore_eos=False)
    engine.add(seq)
    engine.add_text("s", "Is it there? Then wait? ", is_final=False)  # two complete segments
    steps(engine, 20)
    assert frames_of(sink).shape[0] == 8 and not sink.done.is_set()  # 4 frames each, then the 5th ended it
    engine.add_text("s", " ", is_final=True)
    steps(engine, 2)
    assert sink.done.is_set() and sink.error is None
    assert [c.chunk_index for c in sink.chunks] == list(range(len(sink.chunks)))


def force_end_of_speech(lm, monkeypatch, at_frame: int) -> None:
    """The model ends each segment's speech at its `at_frame`-th frame."""
    counts: dict[int, int] = {}
    prefill, decode = lm.prefill_batch, lm.decode

    def counted_prefill(slots, prompts):
        counts.update({slot: 0 for slot in slots})
        return prefill(slots, prompts)

    def ending_decode(batch):
        codes, is_eos = decode(batch)
        for row, slot in enumerate(batch.slots):
            counts[slot] += 1
            is_eos[row] = is_eos[row] or counts[slot] == at_frame
        return codes, is_eos

    monkeypatch.setattr(lm, "prefill_batch", counted_prefill)
    monkeypatch.setattr(lm, "decode", ending_decode)
