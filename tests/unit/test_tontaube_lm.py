"""TontaubeV1's semantic model in the LM engine (models/tontaube/lm.py): its greedy codes through the real engine
(slots, batched steps, the KV cache) are the cascade's semantic model's (the reference's layout and positions,
one sequence at a time) with the same weights, after the forced silence code; two streams in one batch hear only
their own text; every chunk carries the stream's refinement context (the refiners' text and the voice rows)."""
from __future__ import annotations

import pytest
import torch

from backend_python.engine.sequence import Sequence
from backend_python.models.base import SamplingParams
from backend_python.models.layers.random_init import init_random_weights
from backend_python.models.tontaube.cascade import Cascade, VoicePrompt
from backend_python.models.tontaube.config import SEMANTIC_CODES
from backend_python.models.tontaube.lm import SILENCE_CODE, TontaubeLM
from backend_python.models.tontaube.predictor import Predictor
from backend_python.models.tontaube.presets import TINY_IDS, tiny
from backend_python.models.tontaube.refine_context import decode_refine_context
from backend_python.models.tontaube.text import TextTokenizer, system_tag, tiny_tokenizer, window
from tests.unit.test_engine import ListSink, make_engine, run_until_done

TOKENIZER = TextTokenizer(tiny_tokenizer())
VOICE = VoicePrompt(tuple(tuple(range(10 * k, 10 * k + 6)) for k in range(4)))


@pytest.fixture(scope="module")
def lm() -> TontaubeLM:
    return TontaubeLM.from_config(tiny(), TOKENIZER, {"tiny": VOICE}, seed=4)


def cascade_of(lm: TontaubeLM) -> Cascade:
    predictors = []
    for config in tiny().predictors:
        model = Predictor(config)
        init_random_weights(model, seed=1)
        predictors.append(model.eval())
    predictors[0].load_state_dict(lm.state_dict())  # the same names: model.*, audio_head.*
    return Cascade(predictors, TINY_IDS, tiny().prompt_caps)


def speak(lm, texts: list[str], frames: int) -> list[ListSink]:
    engine = make_engine(lm, max_seq_len=512)
    sinks = []
    for i, text in enumerate(texts):
        sink = ListSink()
        engine.add(Sequence(request_id=f"r{i}", prompt=lm.encode_prompt(text, "tiny"),
                            sampling=SamplingParams(temperature=0.0), ignore_eos=True, max_frames=frames, sink=sink,
                            generator=torch.Generator().manual_seed(i)))
        sinks.append(sink)
    run_until_done(engine, sinks)
    return sinks


def codes_of(sink: ListSink) -> list[int]:
    return torch.cat([c.tokens[c.context_frames:] for c in sink.chunks])[:, 0].tolist()


def test_the_engine_s_greedy_codes_are_the_cascade_s_semantic_model_s(lm):
    texts = ["Hello there.", "A different line!"]
    sinks = speak(lm, texts, frames=12)
    cascade = cascade_of(lm)
    for text, sink in zip(texts, sinks):
        tag_text = TOKENIZER.ids(window([text], 0, with_neighbours=True, tag=system_tag()))
        expected, _ = cascade.semantic(tag_text, VOICE, forced=[SILENCE_CODE], max_codes=13,
                                       pick=lambda logits: int(logits[:SEMANTIC_CODES].argmax()))
        assert codes_of(sink) == expected[1:], text  # the forced silence is the prompt's, not the output's
    assert codes_of(sinks[0]) != codes_of(sinks[1])


def test_every_chunk_carries_the_refiners_text_and_the_voice_rows(lm):
    sink = speak(lm, ["Hi."], frames=6)[0]
    text, voice = decode_refine_context(sink.chunks[0].refine_context.numpy())
    assert text == TOKENIZER.ids(window(["Hi."], 0, with_neighbours=False, tag=system_tag()))
    assert voice == VOICE
    assert all(torch.equal(c.refine_context, sink.chunks[0].refine_context) for c in sink.chunks)


def test_an_unknown_voice_is_refused_and_a_reference_s_codes_are_the_voice_prompt(lm):
    from backend_python.models.base import VoiceReference
    with pytest.raises(ValueError, match="unknown voice"):
        lm.encode_prompt("Hi.", "nobody")
    with pytest.raises(ValueError, match="ref_codes"):
        lm.encode_prompt("Hi.", None, reference=VoiceReference({}))
    codes = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]])
    cloned = lm.encode_prompt("Hi.", None, reference=VoiceReference({"ref_codes": codes}))
    _, voice = decode_refine_context(cloned.tensors["refine_context"].numpy())
    assert voice.rows == ((1, 5, 9), (2, 6, 10), (3, 7, 11), (4, 8, 12))
    assert cloned.tensors["ids"][:3].tolist() == [TINY_IDS.code(0, c) for c in (1, 5, 9)]  # the prompt's row


def test_timeshare_refines_inline_as_the_lanes_would(lm):
    """In timeshare the LM lane refines and decodes a cascade's chunks itself: whole frames whose other codebooks
    are the refiner's, each chunk continuing the codes of the frames before it."""
    from backend_python.models.tontaube.codec import TontaubeCodec
    from backend_python.models.tontaube.refiner import RefineRequest, TontaubeRefiner
    from backend_python.models.tontaube.tiny import codec_config

    cascade = cascade_of(lm)
    refiner = TontaubeRefiner(tiny(), cascade.predictors[1:])
    decoded: list = []

    class Recording(TontaubeCodec):
        def decode_windows(self, windows, conditions=None):
            decoded.extend(codes.clone() for codes, _ in windows)
            return super().decode_windows(windows, conditions)

    codec = Recording.random(codec_config())
    engine = make_engine(lm, max_seq_len=512)
    engine.codec, engine.refiner = codec, refiner
    sink = ListSink()
    engine.add(Sequence(request_id="t", prompt=lm.encode_prompt("Hi there.", "tiny"),
                        sampling=SamplingParams(temperature=0.0), ignore_eos=True, max_frames=9, sink=sink,
                        generator=torch.Generator().manual_seed(0)))
    run_until_done(engine, [sink])
    assert sink.error is None and all(c.audio is not None for c in sink.chunks)
    semantic = codes_of(sink)
    context = sink.chunks[0].refine_context.numpy()
    assert len(decoded) == len(sink.chunks) and all(w.shape[1] == 4 for w in decoded)  # whole frames, each chunk
    # the stream refined chunk by chunk as the lanes do: the last window holds what the engine refined
    refined, done = [], 0
    for chunk in sink.chunks:
        end = chunk.start_frame - chunk.context_frames + chunk.tokens.shape[0]
        if end > done:
            refined += refiner.refine([RefineRequest(semantic[:end], refined, context)])[0].tolist()
            done = end
    last = decoded[-1]
    start = sink.chunks[-1].start_frame - sink.chunks[-1].context_frames
    assert last[:, 1:].tolist() == refined[start:start + last.shape[0]]
    assert last[:, 0].tolist() == semantic[start:start + last.shape[0]]


def test_a_stream_spoken_in_segments_refines_each_segment_alone(lm):
    """A streamed text is spoken segment by segment, each its own prompt: every chunk names its segment's first
    frame, and the inline refiner (as the router's track: vox_ensemble/refiner_lanes.py) reads that segment's codes
    and text only, its earlier frames' codes forced."""
    from backend_python.engine.config import EngineConfig
    from backend_python.engine.engine import LMEngine
    from backend_python.models.tontaube.refiner import TontaubeRefiner
    from backend_python.models.text_segments import SegmentedText, SegmentRules
    from scheduler import AdmissionPolicyName, ChunkingConfig, SchedulerConfig

    cascade = cascade_of(lm)
    seen: list = []

    class Recording(TontaubeRefiner):
        def refine(self, requests):
            seen.extend(requests)
            return super().refine(requests)

    refiner = Recording(tiny(), cascade.predictors[1:])
    chunking = ChunkingConfig(first_chunk_frames=2, chunk_frames=4, chunk_growth=None)
    engine = LMEngine(lm, EngineConfig(max_slots=2, max_seq_len=512, codec_left_context_frames=2,
                                       scheduler=SchedulerConfig(chunking=chunking,
                                                                 admission_policy=AdmissionPolicyName.PREFILL_FIRST)),
                      codec=_PassThroughCodec(), refiner=refiner)
    sink = ListSink()
    feed = SegmentedText(lambda text, context: lm.encode_segment(text, "tiny", context), lm.frame_rate,
                         SegmentRules(chars_per_s=60.0))
    engine.add(Sequence(request_id="s", prompt=None, sampling=SamplingParams(temperature=0.0), ignore_eos=True,
                        max_frames=30, sink=sink, generator=torch.Generator().manual_seed(0), text=feed))
    for piece in ("Get the trust fund to the bank early.", " Then wait for it."):
        engine.add_text("s", piece, is_final=False)
        for _ in range(20):
            engine._collect(0)
            engine.step()
    engine.add_text("s", "", is_final=True)
    run_until_done(engine, [sink])
    starts = sorted({c.segment_start for c in sink.chunks})
    assert len(starts) >= 2 and starts[0] == 0  # spoken in segments, each chunk naming its own
    second = [r for r in seen if r.context.tolist() != seen[0].context.tolist()]
    assert second, "no refinement read the second segment's text"
    semantic = codes_of(sink)
    for request in second:  # the second segment's codes from its first frame, never the first segment's
        assert request.semantic == semantic[starts[1]:starts[1] + len(request.semantic)]


class _PassThroughCodec:
    """An inline codec that returns silence of the window's length (the test reads the refiner's inputs)."""

    num_codebooks, samples_per_frame, sample_rate, lookahead_frames, overlap_frames = 4, 1920, 24000, 0, 0
    uses_stream_position = False

    def decode_windows(self, windows, conditions=None):
        return [torch.zeros((codes.shape[0] - context) * 1920) for codes, context in windows]
