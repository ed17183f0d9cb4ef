"""Streamed text for a family whose prompt needs the whole text (CSM, Orpheus): spoken segment by segment.

The text is cut as it arrives: at a sentence end, and at a clause mark once the segment holds
`clause_min_words` words. A segment ends where its closing punctuation is followed by whitespace (so
"3.5" never cuts), and a full stop only before a word that does not start in lower case (so "e.g. a"
does not); the open end of the text waits for what follows it or for the close. Each segment is one prompt of the family with the request's
voice; its frames continue the stream's (the codec's left context and the chunk numbers run on), and a
family that conditions on what was said (CSM) gets the segment before as context.

Segments depend on the text alone, never on how it was cut into pieces or when they came, so the same
seed gives the same frames for the same text however it streams (the engine makes the limits of a
segment that is not yet known to be the last wait for the text, never guess: engine/segments.py).
"""
from __future__ import annotations

import math
import re
from collections import deque
from dataclasses import dataclass
from typing import Callable

import torch

from protocol.quoting import quoted

from .base import Prompt, SpeechLM, TextFeed

# a full stop ends a sentence only before a word that does not start in lower case ("e.g. a" goes on)
_SENTENCE_END = re.compile(r"(?:[!?…。！？]+[\"'”’)\]]*(?=\s)|\.+[\"'”’)\]]*(?=\s+(?![a-z])\S))")
_CLAUSE_END = re.compile(r"[,;:—–]+[\"'”’)\]]*(?=\s)")
_WORD = re.compile(r"\w")


@dataclass(frozen=True)
class SegmentRules:
    """Where streamed text is cut, and how long a segment may speak."""

    clause_min_words: int = 6  # a clause mark ends a segment once it holds this many words
    max_chars: int = 300  # a segment with no boundary this long ends at its last sentence end, else its last space
    min_chars: int = 0  # a boundary ends a segment only once it holds this many characters (sentences group)
    chars_per_s: float = 14.0  # speaking rate that sizes a segment's frame budget
    cap_factor: float = 4.0  # a segment ends by itself after cap_factor × budget + cap_extra_s (no EOS seen)
    cap_extra_s: float = 2.0

    def __post_init__(self) -> None:
        if self.clause_min_words < 1 or self.max_chars < 16 or not 0 <= self.min_chars < self.max_chars:
            raise ValueError(f"clause_min_words must be >= 1, max_chars >= 16 and 0 <= min_chars < max_chars: {self}")
        if not (self.chars_per_s > 0 and self.cap_factor >= 1 and self.cap_extra_s >= 0):
            raise ValueError(f"chars_per_s must be > 0, cap_factor >= 1, cap_extra_s >= 0: {self}")

    def budget_frames(self, text: str, frame_rate: float) -> int:
        """Frames a segment's text takes at the speaking rate (ignore_eos speaks exactly this much)."""
        return max(1, math.ceil(frame_rate * len(text) / self.chars_per_s))

    def cap_frames(self, text: str, frame_rate: float) -> int:
        """Frames after which a segment whose model never ended it ends anyway."""
        return math.ceil(self.cap_factor * self.budget_frames(text, frame_rate) + self.cap_extra_s * frame_rate)


@dataclass(frozen=True)
class SegmentContext:
    """The segment spoken before, for a family that conditions on it."""

    text: str
    frames: torch.Tensor  # [T, K] int64, cpu


SegmentEncoder = Callable[[str, "SegmentContext | None"], Prompt]  # (segment text, context) -> prompt


# a whole text (a chapter) too long for one prompt: sentences grouped into segments of 150-300 characters
# (10-20 s of speech), each a prompt of its own; a clause mark cuts only a run-on sentence of 40 words
WHOLE_TEXT_RULES = SegmentRules(clause_min_words=40, min_chars=150)


def split_segments(pending: str, rules: SegmentRules) -> tuple[list[str], str]:
    """The complete segments at the start of `pending` and what is left of it (the open segment)."""
    segments = []
    while (end := _segment_end(pending, rules)) is not None:
        segments.append(pending[:end].strip())
        pending = pending[end:]
    return segments, pending


def _segment_end(text: str, rules: SegmentRules) -> int | None:
    """Where the first complete segment of `text` ends (its closing whitespace not included), or None."""
    for match in _boundaries(text):
        if match.end() > rules.max_chars:
            break  # cut below max_chars, as when the text comes in pieces: the cut depends on the text alone
        head = text[:match.end()]
        if (_WORD.search(head) and len(head.lstrip()) >= rules.min_chars
                and (match.re is _SENTENCE_END or len(head.split()) >= rules.clause_min_words)):
            return match.end()
    if len(text) > rules.max_chars:
        sentences = [m.end() for m in _SENTENCE_END.finditer(text, 0, rules.max_chars) if _WORD.search(text[:m.end()])]
        if sentences:  # only where min_chars held a sentence end back
            return sentences[-1]
        space = text.rfind(" ", 0, rules.max_chars)
        return space if space > 0 and _WORD.search(text[:space]) else rules.max_chars
    return None


def _boundaries(text: str) -> list[re.Match]:
    return sorted([*_SENTENCE_END.finditer(text), *_CLAUSE_END.finditer(text)], key=lambda m: m.end())


class SegmentedText(TextFeed):
    """A request's streamed text as segments: `prompt()` is the current segment's, `next_segment` moves on.

    Only the engine's thread touches it. `is_segmented` tells the engine to speak the segments one after
    another in the request's slot (engine/segments.py)."""

    is_segmented = True

    def __init__(self, encode: SegmentEncoder, frame_rate: float, rules: SegmentRules = SegmentRules()) -> None:
        self._encode, self._frame_rate, self.rules = encode, frame_rate, rules
        self._pending = ""  # text after the last complete segment
        self._ready: deque[str] = deque()  # complete segments not yet spoken; [0] is the current one
        self._context: SegmentContext | None = None
        self._prompt: Prompt | None = None  # the current segment's, built once
        self._is_closed = False
        self.num_segments = 0  # segments spoken so far

    def append(self, text: str) -> None:
        segments, self._pending = split_segments(self._pending + text, self.rules)
        self._ready.extend(segments)

    def close(self) -> None:
        rest = self._pending.strip()
        if _WORD.search(rest) or (rest and not self._ready and not self.num_segments):
            self._ready.append(rest)
        self._pending, self._is_closed = "", True
        if not self._ready and not self.num_segments:
            raise ValueError("the text is empty")

    @property
    def is_closed(self) -> bool:
        return self._is_closed

    @property
    def num_prompt_tokens(self) -> int:
        return 1  # unknown before the text is: each segment's prompt is checked when it is prefilled

    def prompt(self) -> Prompt | None:
        """The current segment's prompt (with the segment before as context), or None until it is complete."""
        if self._prompt is None and self._ready:
            self._prompt = self._encode(self._ready[0], self._context)
        return self._prompt

    @property
    def current_text(self) -> str:
        return self._ready[0] if self._ready else ""

    @property
    def has_next(self) -> bool:
        """A segment after the current one is complete."""
        return len(self._ready) > 1

    @property
    def is_last(self) -> bool:
        """The current segment is known to be the last (the text is closed and nothing follows it)."""
        return self._is_closed and len(self._ready) <= 1

    def budget_frames(self) -> int:
        return self.rules.budget_frames(self.current_text, self._frame_rate)

    def frames_before_last(self) -> int:
        """A closed text's frames before its last segment when each speaks its budget (`ignore_eos`)."""
        return sum(self.rules.budget_frames(text, self._frame_rate) for text in list(self._ready)[:-1])

    def cap_frames(self) -> int:
        return self.rules.cap_frames(self.current_text, self._frame_rate)

    def next_segment(self, frames: torch.Tensor) -> None:
        """The current segment was spoken as `frames` ([T, K] int64): move to the next one."""
        self._context = SegmentContext(self._ready.popleft(), frames)
        self._prompt, self.num_segments = None, self.num_segments + 1


def open_whole_text(model: SpeechLM, text: str, voice: str | None, reference=None, **options) -> SegmentedText:
    """A whole text too long for one prompt (a chapter), closed: spoken as one stream of segments of
    WHOLE_TEXT_RULES, each the family's `encode_segment` (with the segment before as context where the
    family takes it, and `reference`'s voice and the request's prompt `options` in each). Raises ValueError for
    an empty text."""
    feed = SegmentedText(lambda segment, context: model.encode_segment(segment, voice, context, reference=reference,
                                                                       **options),
                         model.frame_rate, WHOLE_TEXT_RULES)
    feed.append(text)
    feed.close()
    return feed


def open_streamed_text(model: SpeechLM, voice: str | None, **options) -> TextFeed:
    """A streaming-text request's text for `model`: its own feed where its prompt needs only the text's
    start (the text trails, as in Qwen3-TTS), else segment by segment. Raises ValueError naming an
    unknown voice."""
    if model.supports_streaming_text:
        return model.open_text(voice, **options)
    if voice is not None and voice not in model.voices:  # refused now, not at the first segment
        raise ValueError(f"unknown voice {quoted(voice)}; known voices: {list(model.voices)}")
    return SegmentedText(lambda text, context: model.encode_segment(text, voice, context, **options), model.frame_rate)
