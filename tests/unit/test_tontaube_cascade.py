"""TontaubeV1's cascade (models/tontaube/cascade.py, text.py) on tiny random weights: each model's sequence laid out
as the reference lays it out; a refiner's greedy codes are, step for step, the argmax of the reference's math
(transformers' Qwen3 at the scheme's positions + the reference's head) over the finished sequence; a segment
refined in pieces (each forced with the codes before it) equals one whole pass; the semantic model stops at end
of speech or the audio marker."""
from __future__ import annotations

import pytest
import torch

from backend_python.models.layers.random_init import init_random_weights
from backend_python.models.tontaube.cascade import (AUDIO_MARKER_INDEX, END_OF_SPEECH_INDEX, Cascade, VoicePrompt,
                                                    refiner_sequence, semantic_sequence)
from backend_python.models.tontaube.config import PROMPT_CAPS
from backend_python.models.tontaube.predictor import Predictor
from backend_python.models.tontaube.presets import TINY_IDS, tiny
from backend_python.models.tontaube.text import TextTokenizer, system_tag, tiny_tokenizer, window
from tests.unit.test_tontaube_predictor import reference_logits

IDS = TINY_IDS
TOKENIZER = TextTokenizer(tiny_tokenizer())
PROMPT = VoicePrompt(((1, 2, 3, 4), (10, 11, 12, 13), (20, 21, 22, 23), (30, 31, 32, 33)))
SEMANTIC = [7, 300, 16000, 5, 5, 9, 1000]


@pytest.fixture(scope="module")
def cascade() -> Cascade:
    predictors = []
    for config in tiny().predictors:
        model = Predictor(config)
        init_random_weights(model, seed=11 + config.target_codebook)
        predictors.append(model.eval())
    return Cascade(predictors, IDS, PROMPT_CAPS)


def text_ids(text: str = "Hello there.") -> list[int]:
    return TOKENIZER.ids(window([text], 0, with_neighbours=False, tag=system_tag()))


def test_the_refiner_s_sequence_is_the_reference_s_layout():
    seq = refiner_sequence(IDS, 2, PROMPT, 3, [100, 101], [7, 8], [[40, 41]], forced=[50])
    code = IDS.code
    assert seq == ([code(0, 1), code(0, 2), code(0, 3), code(1, 10), code(1, 11), code(1, 12), code(2, 20),
                    code(2, 21), code(2, 22), 100, 101, IDS.pad, code(0, 7), code(0, 8), IDS.eos,
                    IDS.pad, code(1, 40), code(1, 41), IDS.pad, code(2, 50)])
    semantic = semantic_sequence(IDS, PROMPT, 2, [100], previous=[9], forced=[3])
    assert semantic == [code(0, 1), code(0, 2), 100, IDS.pad, code(0, 9), IDS.audio_marker, code(0, 3)]


def test_the_text_is_one_id_a_character_after_the_system_tag():
    ids = text_ids("Hi é")
    tag = TOKENIZER.ids(system_tag())
    assert ids[:len(tag)] == tag and tag[0] == TOKENIZER.special("<|im_start|>")
    assert ids[len(tag):] == [ord("H"), ord("i"), ord(" "), 0xC3, ord("\n")]  # é: its first byte's id


@pytest.mark.parametrize("codebook", [1, 3])
def test_a_refiner_s_greedy_codes_are_the_reference_s_argmax_over_the_finished_sequence(cascade, codebook):
    lower = cascade.refine_all(text_ids(), SEMANTIC, PROMPT)[:codebook - 1]
    codes = cascade.refine(codebook, text_ids(), SEMANTIC, lower, PROMPT)
    assert len(codes) == len(SEMANTIC)
    model = cascade.predictors[codebook]
    prefill = refiner_sequence(IDS, codebook, PROMPT, PROMPT_CAPS[codebook], text_ids(), SEMANTIC, lower)
    run = model.start(len(prefill) + len(codes))
    run.prefill(prefill, IDS)
    positions = run.positions.prefill + [run.positions.decoded(t, 4096) for t in range(len(codes) - 1)]
    full = prefill + [IDS.code(codebook, c) for c in codes[:-1]]
    logits = reference_logits(model, full, positions)[len(prefill) - 1:]
    assert logits.argmax(dim=-1).tolist() == codes


def test_a_segment_refined_in_pieces_equals_one_whole_pass(cascade):
    whole = cascade.refine_all(text_ids(), SEMANTIC, PROMPT)
    done: list[list[int]] = [[], [], []]
    for end in (2, 5, len(SEMANTIC)):  # each piece forced with the codes refined before it
        rows = cascade.refine_all(text_ids(), SEMANTIC, PROMPT, forced=[row[:len(done[0])] for row in done])
        done = [row[:end] for row in rows]
    assert done == whole and len({tuple(r) for r in whole}) == 3


def test_the_semantic_model_stops_at_end_of_speech_or_at_its_limit(cascade):
    codes, ended = cascade.semantic(text_ids(), PROMPT, max_codes=6)
    assert len(codes) == 6 and ended is None and all(0 <= c < 16384 for c in codes)
    head = cascade.predictors[0].audio_head.fc2
    saved = head.bias.detach().clone()
    try:
        with torch.no_grad():
            head.bias[END_OF_SPEECH_INDEX] = 1e4
        assert cascade.semantic(text_ids(), PROMPT, forced=[3], max_codes=6) == ([3], END_OF_SPEECH_INDEX)
        with torch.no_grad():
            head.bias[END_OF_SPEECH_INDEX], head.bias[AUDIO_MARKER_INDEX] = saved[END_OF_SPEECH_INDEX], 1e4
        assert cascade.semantic(text_ids(), PROMPT, max_codes=6) == ([], AUDIO_MARKER_INDEX)
    finally:
        with torch.no_grad():
            head.bias.copy_(saved)
