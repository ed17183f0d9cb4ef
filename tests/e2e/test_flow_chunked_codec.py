"""A flow-matching family through a real tritonserver: the streamed audio equals the served pipeline done
offline on the same frames. Each chunk's window (left context, new frames, lookahead, its start frame and the
voice's speaker embedding) decoded by the codec, kept to its new frames plus the overlap, joined with the
router's cross-fade. Chunks go to both codec lanes, so this checks that neither lane loses the lookahead, the
start frame or the condition. (How close chunked decoding comes to a full-utterance decode is the codec's
golden unit test: tests/unit/test_cosyvoice3_codec.py.)"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from backend_python.engine.codec_runner import StreamChunk, decode_windowed
from backend_python.models import registry
from backend_python.vox_ensemble.overlap_join import OverlapJoin
from clients.stream import synthesize
from tests.e2e.test_streaming import TEXT, chunk_frames, lm_tokens

PRESETS = ["cosyvoice3-tiny", "flashtts-tiny"]
TOLERANCE = 1e-4  # the same float32 arithmetic on the same CPU; batching with other windows may reorder sums


@pytest.mark.parametrize("family", PRESETS, indirect=True)
@pytest.mark.parametrize("voice", [None, "bob"])
def test_streamed_audio_is_the_chunked_decode_with_lookahead_and_overlap(family, voice):
    seed, seconds = 23, 2.4
    tokens = torch.from_numpy(lm_tokens(family.url, seed, seconds, voice=voice).astype(np.int64))
    streamed = synthesize(family.url, TEXT, voice=voice, seed=seed, max_audio_seconds=seconds, ignore_eos=True)
    spec = registry.resolve(family.preset)
    lm = registry.load_lm(spec, device="cpu", dtype="float32")
    codec = registry.load_codec(spec, device="cpu", dtype="float32")
    window = registry.codec_windowing(spec)
    assert window.lookahead_frames > 0 and codec.condition_dim > 0
    condition = lm.codec_condition(lm.encode_prompt(TEXT, voice))
    join, pieces, start = OverlapJoin(), [], 0
    for size in chunk_frames(tokens.shape[0], family.preset):
        end = start + size
        first, last = max(0, start - window.left_context_frames), min(tokens.shape[0], end + window.lookahead_frames)
        chunk = StreamChunk("s", tokens[first:last], start - first, start, lookahead_frames=last - end,
                            condition=condition)
        audio = decode_windowed(codec, [chunk])[0].numpy()
        tail = min(window.overlap_frames, last - end) * codec.samples_per_frame
        pieces.append(join.join(audio, tail))
        start = end
    expected = np.concatenate(pieces)
    assert streamed.audio.shape == expected.shape == (tokens.shape[0] * family.samples_per_frame,)
    assert {c.lane for c in streamed.chunks} >= {"urgent", "background"} or len(streamed.chunks) < 3
    np.testing.assert_allclose(streamed.audio, expected, rtol=0, atol=TOLERANCE)
    assert np.abs(expected).max() > 1e-3  # not silence
