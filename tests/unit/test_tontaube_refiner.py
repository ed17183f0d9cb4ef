"""The refinement lane's TontaubeV1 refiners (models/tontaube/refiner.py): chunks of several streams refined in one
batch (their greedy steps together) give each stream what the cascade gives it alone, with its earlier codes
forced; a bad request is refused by name."""
from __future__ import annotations

import numpy as np
import pytest

from backend_python.models.tontaube.cascade import VoicePrompt
from backend_python.models.tontaube.refine_context import encode_refine_context
from backend_python.models.tontaube.refiner import RefineRequest, TontaubeRefiner, build_request
from tests.unit.test_tontaube_cascade import cascade, text_ids  # noqa: F401 (the fixture)

VOICE = VoicePrompt(((1, 2, 3), (10, 11, 12), (20, 21, 22), (30, 31, 32)))


def request(semantic, refined, text="Hello there.", voice=VOICE) -> RefineRequest:
    return RefineRequest(semantic, refined, encode_refine_context(text_ids(text), voice, 300))


def test_a_batch_of_streams_is_refined_as_each_alone(cascade):  # noqa: F811
    refiner = TontaubeRefiner(_config(), cascade.predictors[1:])
    semantic_a, semantic_b = [7, 300, 16000, 5, 5, 9], [1, 2, 3, 4]
    whole_a = cascade.refine_all(text_ids(), semantic_a, VOICE)
    forced_a = [list(frame) for frame in zip(*[row[:2] for row in whole_a])]  # its first 2 frames already refined
    whole_b = cascade.refine_all(text_ids("Another one"), semantic_b, None)
    got = refiner.refine([request(semantic_a, forced_a), request(semantic_b, [], "Another one", None),
                          request(semantic_a, [list(f) for f in zip(*whole_a)])])
    assert got[0].tolist() == [list(f) for f in zip(*whole_a)][2:]
    assert got[1].tolist() == [list(f) for f in zip(*whole_b)]
    assert got[2].shape == (0, 3)


@pytest.mark.parametrize("bad, message", [
    (request([], []), "semantic codes"),
    (request([70000], []), "semantic codes"),
    (request([1, 2], [[1, 2]]), "refined codes"),
    (request([1], [[1, 2, 3], [1, 2, 3]]), "refined codes"),
    (RefineRequest([1], [], np.array([5, 1], np.int32)), "refine_context"),
])
def test_a_bad_request_is_refused_by_name(cascade, bad, message):  # noqa: F811
    with pytest.raises(ValueError, match=message):
        TontaubeRefiner(_config(), cascade.predictors[1:]).check(bad)


def test_the_lane_s_tensors_make_a_request():
    r = build_request(np.array([[3, 4]]), np.zeros((1, 1, 3), np.int32), np.array([0, 0]))
    assert r.semantic == [3, 4] and r.refined == [[0, 0, 0]] and r.context.tolist() == [0, 0]


def _config():
    from backend_python.models.tontaube.presets import tiny
    return tiny()
