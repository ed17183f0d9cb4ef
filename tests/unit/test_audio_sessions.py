"""Audio-in sessions in the router (vox_ensemble/audio_sessions.py), without a server: each piece checked as it
comes (rate, dtype, finiteness, full scale, size, the session's length, after the close), and the input cut on a
fixed grid whatever the pieces."""
from __future__ import annotations

import random

import numpy as np
import pytest

from backend_python.stub_common.request_inputs import RequestError
from backend_python.vox_ensemble.audio_sessions import AudioInLimits, AudioSessions, InputChunker, check_rate

LIMITS = AudioInLimits(max_piece_s=1.0, max_input_s=3.0, chunk_frames=4, context_frames=12)


def audio(seconds: float, rate: int = 24000, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, int(seconds * rate)).astype(np.float32)


def windows(chunker: InputChunker, samples: np.ndarray, cuts: list[int]):
    out, start = [], 0
    for size in cuts:
        out += chunker.push(samples[start:start + size], False)
        start += size
    return out + chunker.push(samples[start:], True)


@pytest.mark.parametrize("rate", [24000, 16000, 44100])
def test_the_chunks_are_the_same_however_the_input_is_cut(rate):
    samples = audio(2.7, rate)
    whole = windows(InputChunker(rate, LIMITS), samples, [])
    frame = rate * 2 // 25
    assert sum(w.new_frames for w in whole) == -(-samples.size // frame)
    assert [w.is_last for w in whole] == [False] * (len(whole) - 1) + [True]
    assert whole[0].audio.size == 4 * frame and whole[3].audio.size == 16 * frame  # context grows to 12 frames
    rng = random.Random(rate)
    for _ in range(5):
        cuts = [rng.choice([0, 1, 333, frame, 5 * frame - 1]) for _ in range(rng.randint(1, 12))]
        again = windows(InputChunker(rate, LIMITS), samples, cuts)
        assert [(w.new_frames, w.is_last) for w in again] == [(w.new_frames, w.is_last) for w in whole]
        assert all(np.array_equal(a.audio, b.audio) for a, b in zip(again, whole)), cuts


def test_an_input_closed_on_a_chunk_edge_or_empty_still_ends():
    frame = 1920
    exact = windows(InputChunker(24000, LIMITS), audio(8 * frame / 24000), [])
    assert [(w.new_frames, w.is_last) for w in exact] == [(4, False), (4, True)]
    assert [(w.new_frames, w.is_last) for w in windows(InputChunker(24000, LIMITS), np.zeros(0, np.float32), [])] \
        == [(0, True)]


def test_rates_off_the_frame_grid_and_out_of_range_are_refused():
    assert check_rate(22050) == 22050
    for rate in (22001, 7975, 48025, None):
        with pytest.raises(RequestError) as raised:
            check_rate(rate)
        assert raised.value.ended.code == "unsupported_input_sample_rate"


@pytest.mark.parametrize("piece, rate, detail", [
    (np.array([0.1, np.nan], np.float32), None, "NaN"),
    (np.array([0.1, 1.2], np.float32), None, "full scale"),
    (np.zeros(10, np.float64), None, "FP32"),
    (np.zeros(24001, np.float32), None, "a piece may hold 1 s"),
    (np.zeros(10, np.float32), 16000, "16000 Hz"),
])
def test_a_bad_piece_is_refused_by_name_and_changes_nothing(piece, rate, detail):
    sessions = AudioSessions(LIMITS)
    sessions.open(7, "s", 24000, audio(0.5))
    with pytest.raises(RequestError, match=detail) as raised:
        sessions.take(7, piece, rate, is_final=False)
    assert raised.value.ended.code == "bad_piece" and raised.value.ended.param == "input_audio"
    stream_id, samples = sessions.take(7, audio(0.5), None, is_final=True)  # the session goes on
    assert stream_id == "s" and samples.size == 12000


def test_the_input_s_length_the_close_and_the_session_s_end_are_enforced():
    sessions = AudioSessions(LIMITS)
    sessions.open(7, "s", 24000, None)
    for _ in range(3):
        sessions.take(7, audio(0.99), None, is_final=False)
    with pytest.raises(RequestError, match="longer than 3 s"):
        sessions.take(7, audio(0.1), None, is_final=False)
    sessions.take(7, None, None, is_final=True)
    with pytest.raises(RequestError) as closed:
        sessions.take(7, audio(0.01), None, is_final=False)
    assert closed.value.ended.code == "session_closed"
    sessions.end(7)
    with pytest.raises(RequestError) as ended:
        sessions.take(7, audio(0.01), None, is_final=False)
    assert ended.value.ended.code == "session_ended" and sessions.knows(7)
    with pytest.raises(RequestError) as unknown:
        sessions.take(8, audio(0.01), None, is_final=False)
    assert unknown.value.ended.code == "unknown_session" and not sessions.knows(8)


def test_the_documented_audio_in_example_is_the_tested_code():
    """docs/STREAMING.md shows clients/audio_in_ws.py's example word for word (tests/e2e/test_audio_in.py runs it)."""
    import re
    from pathlib import Path

    root = Path(__file__).parents[2]
    source = (root / "clients" / "audio_in_ws.py").read_text()
    example = re.search(r"# example: begin\n(.*?)# example: end\n", source, re.S).group(1)
    assert example in (root / "docs" / "STREAMING.md").read_text()
