"""Streamed text for the families whose prompt needs the whole text (CSM, Orpheus), against a real tritonserver:
a session fed word by word is spoken segment by segment as one stream (chunks 0, 1, 2, … with all the audio
the request asked for), the first sentence is heard before the text is closed, a bad voice is refused at
once, and a session whose text has no sentence yet holds its slot only until its idle timeout."""
from __future__ import annotations

import time

import pytest

from clients.stream import StreamError
from clients.text_stream import speak_streaming_text
from protocol.reasons import EndReason
from tests.e2e.test_text_stream import words

TEXT = "Get the trust fund to the bank early. Then wait for it."
MAX_AUDIO_S = 4.0  # the first sentence speaks its budget (about 2.6 s), the last one the rest


@pytest.fixture
def segmented(family):
    if family.preset.startswith("qwen3-tts"):
        pytest.skip("Qwen3-TTS consumes the text as it speaks (test_text_stream.py)")
    return family


def test_a_session_fed_word_by_word_is_one_stream_of_all_its_segments(segmented):
    streamed = speak_streaming_text(segmented.url, words(TEXT, pause_s=0.3), seed=3, max_audio_seconds=MAX_AUDIO_S,
                                    ignore_eos=True)
    assert streamed.piece_errors == []
    assert [c.index for c in streamed.chunks] == list(range(len(streamed.chunks)))
    num_frames = round(MAX_AUDIO_S * segmented.frame_rate)  # ignore_eos: the last segment runs to the end
    assert streamed.audio.size == num_frames * segmented.samples_per_frame
    assert streamed.ttfa_s < streamed.text_done_s  # the first sentence is complete at "Then", 0.9 s before the close


def test_an_unknown_voice_is_refused_when_the_session_opens(segmented):
    with pytest.raises(StreamError) as refused:
        speak_streaming_text(segmented.url, ["Hello there. "], voice="nobody", seed=1)
    assert refused.value.ended.reason is EndReason.REFUSED_BAD_INPUT and "unknown voice 'nobody'" in str(refused.value)


def test_a_session_without_a_complete_sentence_ends_at_its_idle_timeout(segmented):
    with pytest.raises(StreamError) as ended:
        speak_streaming_text(segmented.url, _hold(["Get the trust fund"], seconds=6.0), seed=1,
                             text_idle_timeout_s=1.0, timeout_s=30)
    assert ended.value.ended.code == "text_idle_timeout" and "1 s" in ended.value.ended.message


def _hold(pieces, seconds: float):
    """`pieces`, then nothing for `seconds` (the session stays open), then the close."""
    yield from pieces
    time.sleep(seconds)
