"""Word timestamps (engine/word_clock.py): the alignment rule on its own, then through the engine's chunks."""
from __future__ import annotations

import pytest
import torch

from backend_python.engine.word_clock import CHARS_PER_S, MAX_STRETCH, WordClock
from tests.unit import test_engine, test_engine_segments

RATE = 12.5
FRAMES_PER_CHAR = RATE / CHARS_PER_S


def whole(text: str) -> WordClock:
    clock = WordClock(RATE)
    clock.add_text(text, 0)
    clock.close_text()
    return clock


def test_words_are_placed_at_the_speaking_rate_and_sent_once_when_the_audio_reaches_their_end():
    clock = whole("Hello there, my friend.")
    assert clock.due(4) == []  # "Hello" lasts 6 characters: 5.36 frames
    first = clock.due(6)
    assert [w.word for w in first] == ["Hello"]
    assert first[0].start_s == 0.0 and first[0].end_s == pytest.approx(6 / CHARS_PER_S)
    nxt = clock.due(15)
    assert [w.word for w in nxt] == ["there,", "my"]
    assert nxt[0].start_s == first[0].end_s and nxt[1].start_s == nxt[0].end_s
    assert clock.due(15) == []  # each word once


def test_the_end_of_speech_fits_the_words_left_into_the_audio_and_a_long_pause_is_not_a_long_word():
    clock = whole("Hello there, my friend.")
    clock.due(6)
    clock.end(12, is_cut=False)  # the model ended early: the rest is squeezed into frames 5.36 .. 12
    words = clock.due(12)
    assert [w.word for w in words] == ["there,", "my", "friend."]
    assert words[-1].end_s == pytest.approx(12 / RATE)
    assert all(a.end_s == b.start_s for a, b in zip(words, words[1:]))
    slow = whole("Hi there.")
    slow.end(100, is_cut=False)  # 8 s of audio for two words: they keep at most twice their length
    words = slow.due(100)
    assert words[-1].end_s == pytest.approx((3 + 7) * MAX_STRETCH / CHARS_PER_S)


def test_a_stream_cut_by_its_length_sends_only_the_words_that_started_before_the_cut():
    clock = whole("Hello there, my friend.")
    clock.end(8, is_cut=True)
    words = clock.due(8)
    assert [w.word for w in words] == ["Hello", "there,"]  # "there," starts at 5.36 frames
    assert words[-1].end_s == pytest.approx(8 / RATE)


def test_streamed_text_is_never_spoken_before_it_arrived_and_a_word_waits_for_its_end():
    clock = WordClock(RATE)
    clock.add_text("Hel", 0)
    clock.add_text("lo wor", 3)
    assert [w.word for w in clock.due(50)] == ["Hello"]  # "wor" may go on
    clock.add_text("ld and more", 30)
    words = clock.due(50)
    assert [w.word for w in words] == ["world", "and"]
    assert words[0].start_s == pytest.approx(6 / CHARS_PER_S)  # right after "Hello" (its start came at frame 3)
    assert words[1].start_s == pytest.approx(30 / RATE)  # "and" came at frame 30: after the clock
    clock.end(60, is_cut=False)
    assert [w.word for w in clock.due(60)] == ["more"]


def test_a_segments_words_end_with_its_audio_and_never_spill_into_the_next():
    clock = whole("One two. Three four five.")
    clock.start_segment(0, "One two.")
    assert [w.word for w in clock.due(40)] == ["One", "two."]  # not "Three": the segment holds two words
    clock.end_segment(20)
    assert clock.due(20) == []
    clock.start_segment(20, "Three four five.")
    words = clock.due(30)
    assert words[0].word == "Three" and words[0].start_s == pytest.approx(20 / RATE)
    clock.end(40, is_cut=False)
    assert [w.word for w in clock.due(40)] == ["five."]


def test_the_engines_chunks_carry_each_word_once_in_order_within_their_audio():
    """Qwen3-TTS (one prompt): every word of the text comes back once, in order, and each chunk's words end by
    its last frame; no clock, no words."""
    lm = test_engine.lm.__wrapped__()
    engine = test_engine.make_engine(lm)
    text = "Get the trust fund to the bank early."
    seq, sink = test_engine.make_seq(lm, text, frames=40)
    seq.words = whole(text)
    plain, plain_sink = test_engine.make_seq(lm, "No words here.", frames=8)
    engine.add(seq)
    engine.add(plain)
    test_engine.run_until_done(engine, [sink, plain_sink])
    assert all(chunk.words is None for chunk in plain_sink.chunks)
    words = [w for chunk in sink.chunks for w in chunk.words]
    assert [w.word for w in words] == text.split()
    for chunk in sink.chunks:
        end_s = (chunk.start_frame + chunk.num_new_frames) / lm.frame_rate
        assert all(w.end_s <= end_s + 1e-9 for w in chunk.words)
    assert all(a.end_s <= b.start_s + 1e-9 for a, b in zip(words, words[1:]))


def test_a_segmented_stream_places_each_segments_words_inside_its_audio(monkeypatch):
    """CSM speaking two streamed segments, each ended by its end of speech after 4 frames: the first segment's
    words lie in frames 0-4, the second's in 4-8."""
    lm = test_engine_segments.CsmLM.from_config(test_engine_segments.csm_config("csm-tiny"), seed=0)
    test_engine_segments.force_end_of_speech(lm, monkeypatch, at_frame=5)
    engine = test_engine_segments.make_engine(lm)
    seq, sink = test_engine_segments.session(lm, "s", ignore_eos=False)
    seq.words = WordClock(lm.frame_rate)
    engine.add(seq)
    text = "Is it there? Then wait for me. "
    engine.add_text("s", text, is_final=True)
    test_engine_segments.steps(engine, 30)
    assert sink.done.is_set() and sink.error is None
    words = [w for chunk in sink.chunks for w in chunk.words]
    assert [w.word for w in words] == text.split()
    boundary = 4 / lm.frame_rate
    assert all(w.end_s <= boundary + 1e-9 for w in words[:3])
    assert all(w.start_s >= boundary - 1e-9 for w in words[3:])
    assert words[-1].end_s <= 8 / lm.frame_rate + 1e-9
