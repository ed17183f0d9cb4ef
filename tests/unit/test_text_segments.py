"""Streamed text cut into segments for the families whose prompt needs the whole text: where it is cut, that
the cut depends on the text alone (never on its pieces), and what a segment may speak."""
from __future__ import annotations

import random

import pytest
import torch

from backend_python.models.base import Prompt
from backend_python.models.text_segments import (WHOLE_TEXT_RULES, SegmentContext, SegmentedText, SegmentRules,
                                                split_segments)

RULES = SegmentRules()
TEXT = ("Get the trust fund to the bank early. It costs 3.5 dollars, e.g. a coffee! Then we wait, "
        "and we wait, and we wait some more until the money is there; nobody knows why. Done")


def segments_of(pieces, rules: SegmentRules = RULES) -> list[str]:
    spoken = []
    feed = SegmentedText(lambda text, context: _record(spoken, text, context), frame_rate=12.5, rules=rules)
    for piece in pieces:
        feed.append(piece)
    feed.close()
    while feed.prompt() is not None:
        feed.next_segment(torch.zeros(2, 3, dtype=torch.long))
    return spoken


def _record(spoken: list, text: str, context: SegmentContext | None) -> Prompt:
    spoken.append(text)
    return Prompt(num_tokens=len(text))


def test_sentence_ends_cut_and_numbers_and_abbreviations_inside_words_do_not():
    segments, rest = split_segments("It costs 3.5 dollars, e.g. a coffee! Then", RULES)
    assert segments == ["It costs 3.5 dollars, e.g. a coffee!"]  # "e.g." is followed by a space: one more word
    assert rest == " Then"


def test_a_clause_mark_cuts_only_after_enough_words():
    segments, rest = split_segments("Then we wait, and we wait, and we wait some more, until", RULES)
    assert segments == ["Then we wait, and we wait,"]  # six words; the next clause has five
    assert rest == " and we wait some more, until"


def test_the_end_of_the_text_is_held_until_whitespace_or_the_close_says_it_ended():
    assert split_segments("Hello there.", RULES) == ([], "Hello there.")  # "there.5" might follow
    assert segments_of(["Hello there."]) == ["Hello there."]


def test_a_long_run_without_boundaries_is_cut_at_a_space():
    rules = SegmentRules(max_chars=40)
    segments, rest = split_segments("word " * 20, rules)
    assert segments and all(len(s) <= 40 for s in segments)
    assert " ".join(segments + [rest.strip()]).split() == ["word"] * 20


@pytest.mark.parametrize("seed", range(5))
def test_the_segments_are_the_same_however_the_text_is_cut(seed):
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(TEXT)), 25))
    pieces = [TEXT[a:b] for a, b in zip([0] + cuts, cuts + [len(TEXT)])]
    whole = segments_of([TEXT])
    assert segments_of(pieces) == whole == segments_of(list(TEXT))
    assert whole[0] == "Get the trust fund to the bank early." and whole[-1] == "Done"
    assert " ".join(whole).split() == TEXT.split()  # nothing lost, nothing added


def test_each_segment_after_the_first_gets_the_one_before_as_context():
    contexts = []
    feed = SegmentedText(lambda text, context: contexts.append(context) or Prompt(num_tokens=1), frame_rate=12.5)
    feed.append("One sentence. Another one. And")
    frames = torch.arange(6).view(2, 3)
    feed.prompt()
    feed.next_segment(frames)
    feed.prompt()
    assert contexts[0] is None
    assert contexts[1].text == "One sentence." and torch.equal(contexts[1].frames, frames)


def test_what_is_known_of_the_last_segment():
    feed = SegmentedText(lambda text, context: Prompt(num_tokens=1), frame_rate=12.5)
    feed.append("One. Two")
    assert feed.current_text == "One." and not feed.has_next and not feed.is_last
    feed.close()
    assert feed.has_next and not feed.is_last
    feed.next_segment(torch.zeros(1, 1, dtype=torch.long))
    assert feed.current_text == "Two" and feed.is_last


def test_an_empty_text_is_refused_at_the_close_and_trailing_punctuation_adds_no_segment():
    feed = SegmentedText(lambda text, context: Prompt(num_tokens=1), frame_rate=12.5)
    feed.append("   ")
    with pytest.raises(ValueError, match="empty"):
        feed.close()
    assert segments_of(["Hello there. ", " !"]) == ["Hello there."]
    assert segments_of(["🙂"]) == ["🙂"]  # a text with nothing but a symbol is still said, as in one request


def test_budget_and_cap_scale_with_the_text():
    assert RULES.budget_frames("x" * 28, 12.5) == 25  # 2 s at 14 characters a second
    assert RULES.cap_frames("x" * 28, 12.5) == 4 * 25 + 25
    with pytest.raises(ValueError):
        SegmentRules(chars_per_s=0)


CHAPTER = " ".join(f"Sentence number {i} is {'quite ' * (i % 7)}short." for i in range(60))


def test_a_whole_text_is_cut_at_sentence_ends_into_segments_of_a_few_sentences():
    spoken = segments_of([CHAPTER], WHOLE_TEXT_RULES)
    assert " ".join(spoken) == CHAPTER
    assert all(s.endswith(".") for s in spoken)  # every cut at a sentence end
    assert all(WHOLE_TEXT_RULES.min_chars <= len(s) <= WHOLE_TEXT_RULES.max_chars for s in spoken[:-1])
    assert len(spoken) < CHAPTER.count(".") / 3  # sentences grouped, not one prompt each


def test_a_long_sentence_past_min_chars_ends_at_its_last_sentence_end_within_max_chars():
    rules = SegmentRules(clause_min_words=40, min_chars=150, max_chars=200)
    first, second = "A first sentence that is fine.", "Word " * 60
    assert segments_of([f"{first} {second.strip()}. Done."], rules)[0] == first
    assert segments_of(["word " * 100], rules)[0] == ("word " * 40).strip()  # no sentence end: the last space


def test_min_chars_must_stay_below_max_chars():
    with pytest.raises(ValueError, match="min_chars"):
        SegmentRules(min_chars=300, max_chars=300)
