"""`speed` (audio/tempo.py): the tempo changes chunk by chunk, the pitch does not."""
from __future__ import annotations

import numpy as np
import pytest

from audio.stream import StreamAudio
from audio.tempo import TempoStream, atempo_chain

RATE = 24000


def tone(seconds: float, hz: float = 220.0) -> np.ndarray:
    return (0.5 * np.sin(2 * np.pi * hz * np.arange(int(seconds * RATE)) / RATE)).astype(np.float32)


def pitch_hz(audio: np.ndarray) -> float:
    """Upward zero crossings per second, away from the edges."""
    body = audio[RATE // 10: -RATE // 10]
    return np.sum(np.diff(np.sign(body)) > 0) / (body.size / RATE)


def stretched(speed: float, audio: np.ndarray, chunk: int = 3840) -> list[np.ndarray]:
    stream = TempoStream(RATE, speed)
    pieces = [stream.process(audio[i:i + chunk]) for i in range(0, audio.size, chunk)]
    return pieces + [stream.process(np.zeros(0, np.float32), is_last=True)]


def test_an_atempo_chain_multiplies_to_the_speed_with_factors_atempo_takes():
    for speed in (0.25, 0.3, 0.5, 1.5, 4.0):
        chain = atempo_chain(speed)
        assert np.prod(chain) == pytest.approx(speed) and all(f >= 0.5 for f in chain)


@pytest.mark.parametrize("speed", [0.25, 0.5, 1.5, 2.0, 4.0])
def test_the_stretched_stream_lasts_its_length_over_the_speed_at_the_same_pitch(speed):
    audio = tone(3.0)
    out = np.concatenate(stretched(speed, audio))
    assert out.size / RATE == pytest.approx(3.0 / speed, rel=0.02)
    assert pitch_hz(out) == pytest.approx(220.0, rel=0.01)  # resampling would give 220 × speed


def test_audio_comes_out_as_the_chunks_go_in_the_first_chunk_too():
    """A 2-frame first chunk (160 ms) gives most of its stretched audio at once, not with the next chunk."""
    pieces = stretched(2.0, tone(2.0))
    assert sum(p.size for p in pieces[:-1]) > 0.9 * sum(p.size for p in pieces)
    assert pieces[0].size >= 0.05 * RATE  # of the 80 ms due


def test_a_stream_with_a_speed_stretches_before_it_encodes_and_its_tail_drains_the_filter():
    audio = tone(2.0)
    stream = StreamAudio("pcm_f32", None, speed=2.0)
    assert not stream.is_passthrough
    pieces = [stream.process(audio[i:i + 4800], RATE).audio for i in range(0, audio.size, 4800)]
    tail = stream.tail()
    total = sum(p.size for p in pieces) + tail.audio.size
    assert total / RATE == pytest.approx(1.0, rel=0.02) and tail.audio.size > 0
    wav = StreamAudio("wav", 16000, speed=0.5)
    data = b"".join(wav.process(audio[i:i + 4800], RATE, is_last=i + 4800 >= audio.size).data
                    for i in range(0, audio.size, 4800))
    assert (len(data) - 44) / 2 / 16000 == pytest.approx(4.0, rel=0.02)
