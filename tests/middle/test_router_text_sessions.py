"""Streaming-text sessions through the router and the LM glue in-process (fake pb_utils, fake engine): a
Triton sequence's pieces reach the LM in order as whole characters, each piece is answered at once, and
bad pieces, pieces after the end and pieces of unknown sessions are refused without touching the stream."""
from __future__ import annotations

from protocol.tensors import PIECE_ERROR_CODES, SEQUENCE_END, SEQUENCE_START
from protocol.wire import decode_error
from tests.middle.test_router_relay import outcome
from tests.waiting import wait_for


def answer(request):
    """A piece's one response: None (accepted: only the final flag) or the refusal's Ended."""
    assert request.sender.is_final.is_set(), "a piece is answered at once"
    errors = [decode_error(r.error().message()) for r in request.sender.responses if r.has_error()]
    return errors[0] if errors else None


def test_pieces_reach_the_lm_in_order_as_whole_characters(lanes):
    first = lanes.speak("Hel", session=7, flags=SEQUENCE_START, seed=3)
    seq = lanes.engine.next_sequence()
    assert seq.text is not None and seq.text.prompt().text.text == "Hel"
    euro = "€".encode()
    pieces = [lanes.speak(b"lo " + euro[:1], session=7), lanes.speak(euro[1:], session=7),
              lanes.speak("", session=7), lanes.speak(" there.", session=7, flags=SEQUENCE_END)]
    assert [answer(p) for p in pieces] == [None] * 4
    expected = [("lo ", False), ("€", False), ("", False), (" there.", True)]
    assert wait_for(lambda: lanes.engine.texts.get(seq.request_id) == expected)
    lanes.engine.finish(seq.request_id, None)
    assert outcome(first) == ([], None)


def test_bad_pieces_are_refused_and_the_session_goes_on(lanes):
    first = lanes.speak("Hello", session="s1", flags=SEQUENCE_START)
    seq = lanes.engine.next_sequence()
    refusals = [answer(lanes.speak(b"\xff\xfe", session="s1")),  # invalid UTF-8
                answer(lanes.speak("a\x07b", session="s1")),  # a control character
                answer(lanes.speak("x" * 20_000, session="s1")),  # the whole text over max_text_chars
                answer(lanes.speak("hi", session="s1", voice="tiny")),  # a piece with other inputs
                answer(lanes.speak(b"\xe2\x82", session="s1", flags=SEQUENCE_END))]  # ends inside a character
    assert all(r is not None and r.code == "bad_piece" for r in refusals), refusals
    assert "not valid UTF-8 (byte 0 of the piece)" in refusals[0].message and "piece 1 of session 's1'" in refusals[0].message
    assert "U+0007" in refusals[1].message and "limit is 20000" in refusals[2].message
    assert "ends inside a UTF-8 character" in refusals[4].message
    assert answer(lanes.speak(" world", session="s1", flags=SEQUENCE_END)) is None
    after = answer(lanes.speak("more", session="s1"))  # the text is closed: a piece after the end
    assert after.code == "session_closed"
    assert wait_for(lambda: lanes.engine.texts.get(seq.request_id) == [(" world", True)])
    lanes.engine.finish(seq.request_id, None)
    assert outcome(first) == ([], None)
    assert wait_for(lambda: answer(lanes.speak("late", session="s1")).code == "session_ended")


def test_unknown_sessions_and_a_session_started_twice_are_refused(lanes):
    assert answer(lanes.speak("x", session=99)).code == "unknown_session"
    assert answer(lanes.speak("x", session=99, flags=SEQUENCE_END)).code == "unknown_session"
    assert set(PIECE_ERROR_CODES) >= {"unknown_session", "bad_piece"}
    first = lanes.speak("", session=5, flags=SEQUENCE_START)  # an empty first text is fine
    seq = lanes.engine.next_sequence()
    again = lanes.speak("x", session=5, flags=SEQUENCE_START)
    _, ended = outcome(again)
    assert "already live" in ended.message and ended.code not in PIECE_ERROR_CODES
    lanes.engine.finish(seq.request_id, None)
    assert outcome(first) == ([], None)


def test_whole_text_requests_are_unchanged_by_sequence_flags(lanes):
    both = lanes.speak("Hello.", session=3, flags=SEQUENCE_START | SEQUENCE_END)  # a one-request session
    seq = lanes.engine.next_sequence()
    assert seq.text is None and lanes.lm_requests[-1]["is_text_open"] is False
    lanes.engine.finish(seq.request_id, None)
    assert outcome(both) == ([], None)


def test_a_family_that_needs_the_whole_text_speaks_a_session_segment_by_segment(lanes):
    lanes.lm.model.supports_streaming_text, lanes.lm.family = False, "csm"
    first = lanes.speak("Hello there. How", session=9, flags=SEQUENCE_START)
    seq = lanes.engine.next_sequence()
    assert seq.is_segmented and seq.text.current_text == "Hello there."
    assert seq.prompt.num_tokens == len("Hello there.") + 4  # the first segment's own prompt
    assert answer(lanes.speak(" are you?", session=9, flags=SEQUENCE_END)) is None
    lanes.engine.finish(seq.request_id, None)
    assert outcome(first) == ([], None)
