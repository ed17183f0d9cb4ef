"""Streaming text in the LM's loop (engine/text_pieces.py), with the tiny Qwen3-TTS LM and a fake clock: a
request whose next frame needs text that has not arrived skips steps (keeps its slot, the others go on),
gives the same frames as the whole text in one request however the text is cut, and ends with a clear
error when its text stops coming or is empty."""
from __future__ import annotations

import torch

from backend_python.engine.sequence import Sequence
from backend_python.engine.text_pieces import TEXT_IDLE_CODE
from backend_python.models.base import SamplingParams
from protocol.reasons import Ended, EndReason
from tests.unit.test_engine import ListSink, StepClock, lm  # noqa: F401 (the tiny LM fixture)
from tests.unit.test_engine_backpressure import emitted, engine_with_clock, steps

TEXT = "Get the trust fund to the bank early."
FRAMES = 24  # more than the text's tokens: the frames after it read tts_eos, then pad


def sequence(lm, name: str, sink: ListSink, text: str | None, timeout_s: float = 30.0) -> Sequence:
    """A request with the whole `text`, or (None) a streaming-text one whose text is still empty."""
    feed = lm.open_text(None) if text is None else None
    return Sequence(request_id=name, prompt=lm.encode_prompt(text, None) if text is not None else None,
                    sampling=SamplingParams(), ignore_eos=True, max_frames=FRAMES, sink=sink,
                    generator=torch.Generator().manual_seed(5), text=feed, text_idle_timeout_s=timeout_s)


def frames_of(sink: ListSink) -> torch.Tensor:
    return torch.cat([c.tokens[c.context_frames:] for c in sink.chunks])


def whole_text_frames(lm) -> torch.Tensor:
    engine, sink = engine_with_clock(lm, StepClock()), ListSink()
    engine.add(sequence(lm, "whole", sink, TEXT))
    steps(engine, FRAMES + 4)
    assert sink.done.is_set() and sink.error is None
    return frames_of(sink)


def test_text_word_by_word_gives_the_whole_texts_frames_and_waits_for_each_word(lm):
    expected = whole_text_frames(lm)
    clock = StepClock()
    engine, sink, other = engine_with_clock(lm, clock), ListSink(), ListSink()
    engine.add(sequence(lm, "streamed", sink, None))
    engine.add(sequence(lm, "other", other, TEXT))
    words = TEXT.split(" ")
    for i, word in enumerate(words):
        engine.add_text("streamed", word if i == 0 else " " + word, is_final=False)
        steps(engine, 6)  # slower than spoken: the request waits for the next word
        clock.now += 0.5
        assert not sink.done.is_set()
    assert other.done.is_set() and other.error is None  # the other stream went on meanwhile
    waited = emitted(sink)
    assert waited < FRAMES
    engine.add_text("streamed", "", is_final=True)
    steps(engine, FRAMES)
    assert sink.done.is_set() and sink.error is None
    assert torch.equal(frames_of(sink), expected)


def test_text_faster_than_spoken_and_in_odd_pieces_gives_the_same_frames(lm):
    expected = whole_text_frames(lm)
    engine, sink = engine_with_clock(lm, StepClock()), ListSink()
    engine.add(sequence(lm, "streamed", sink, None))
    for piece in ["", "  Get th", "e tr", "", "ust fund to the bank", " early.", "  "]:
        engine.add_text("streamed", piece, is_final=False)
    engine.add_text("streamed", "", is_final=True)
    steps(engine, FRAMES + 4)
    assert sink.error is None and torch.equal(frames_of(sink), expected)


def test_a_request_waiting_for_text_holds_its_slot_and_lets_the_loop_sleep(lm):
    clock = StepClock()
    engine, sink = engine_with_clock(lm, clock), ListSink()
    engine.add(sequence(lm, "streamed", sink, None, timeout_s=10.0))
    steps(engine, 3)
    assert engine.scheduler.running == [] and engine._wait_s() == 10.0  # no prompt yet: not admitted, no busy loop
    engine.add_text("streamed", "Get the trust", is_final=False)
    steps(engine, 10)
    assert len(engine.scheduler.running) == 1 and not sink.done.is_set()
    made = emitted(sink)
    steps(engine, 10)
    assert emitted(sink) == made  # its next frame's text has not come: no step decodes it
    assert engine._wait_s() == 10.0  # asleep until the idle timeout


def test_an_open_text_with_no_new_piece_ends_after_its_idle_timeout(lm):
    clock = StepClock()
    engine, sink, other = engine_with_clock(lm, clock), ListSink(), ListSink()
    engine.add(sequence(lm, "stalled", sink, None, timeout_s=2.0))
    engine.add(sequence(lm, "other", other, TEXT))
    engine.add_text("stalled", "Get the", is_final=False)
    steps(engine, 5)
    clock.now += 1.5
    engine.add_text("stalled", " trust", is_final=False)  # a piece restarts the timer
    clock.now += 1.5
    steps(engine, 2)
    assert not sink.done.is_set()
    clock.now += 0.6
    steps(engine, 1)
    assert isinstance(sink.error, Ended) and sink.error.reason is EndReason.CANCELLED
    assert sink.error.code == TEXT_IDLE_CODE and "2 s" in sink.error.message
    running = engine.scheduler.running
    assert running == [seq for seq in running if seq.request_id == "other"]  # its slot is free
    steps(engine, FRAMES)
    assert other.done.is_set() and other.error is None


def test_a_text_closed_empty_is_bad_input(lm):
    engine, sink = engine_with_clock(lm, StepClock()), ListSink()
    engine.add(sequence(lm, "empty", sink, None))
    engine.add_text("empty", "   ", is_final=False)
    engine.add_text("empty", "", is_final=True)
    steps(engine, 2)
    assert sink.error.reason is EndReason.REFUSED_BAD_INPUT and "empty" in sink.error.message
    assert engine.scheduler.waiting == [] and engine.scheduler.running == []


def test_thousands_of_tiny_pieces_give_the_same_frames(lm):
    expected = whole_text_frames(lm)
    engine, sink = engine_with_clock(lm, StepClock()), ListSink()
    engine.add(sequence(lm, "tiny", sink, None))
    text = TEXT + " " * 3000  # 3 000 pieces of whitespace after the words change nothing
    for i, char in enumerate(text):
        engine.add_text("tiny", char, is_final=False)
        if i % 500 == 0:
            steps(engine, 1)
    engine.add_text("tiny", "", is_final=True)
    steps(engine, FRAMES + 4)
    assert sink.error is None and torch.equal(frames_of(sink), expected)
