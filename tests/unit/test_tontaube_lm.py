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


def test_an_unknown_voice_and_a_reference_are_refused(lm):
    with pytest.raises(ValueError, match="unknown voice"):
        lm.encode_prompt("Hi.", "nobody")
    with pytest.raises(ValueError, match="cannot clone"):
        lm.encode_prompt("Hi.", None, reference=object())


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
