"""Approximate word timestamps of one stream: which words each chunk speaks, and when, in the stream's audio time.

No family here aligns its text to its audio (one that feeds a text token per frame feeds 12.5 tokens a second
against about 4 spoken, so the feed runs ahead of the speech and only bounds it), so the clock is the speaking
rate, held to what the LM does know:

- the words are the text split at whitespace, in order; a word is known once whitespace follows it or the
  text is closed;
- a word lasts its characters and one space at `chars_per_s` (the rate that sizes a text segment's budget,
  models/text_segments.py) and starts where the word before it ended, never before the frame at which its
  text reached the LM (streaming text: a word is not spoken before it is there) nor before its segment's
  first frame;
- a chunk carries the words whose end falls at or before the chunk's last frame, each sent once;
- where a segment (a family that speaks its text segment by segment, engine/segments.py) or the whole stream
  ends, by the model's end of speech, its words not yet sent are fitted between the clock and that end (at no
  less than half the speaking rate: more room is a pause); a segment's words never spill into the next one's
  audio. A stream cut
  by its length limit (`max_audio_seconds`) sends only the words that started before the cut.

Times are seconds of the stream's audio at speed 1.0 (the router scales them for `speed`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

CHARS_PER_S = 14.0  # models/text_segments.py SegmentRules.chars_per_s
MAX_STRETCH = 2.0  # words fitted into a segment's end last at most this many times their length at CHARS_PER_S
_WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class WordTime:
    word: str
    start_s: float
    end_s: float

    def to_json(self) -> dict:
        return {"word": self.word, "start": round(self.start_s, 3), "end": round(self.end_s, 3)}


@dataclass
class _Word:
    text: str
    earliest: int  # the frame at which its text reached the LM
    start: float | None = None  # frames, once placed
    end: float | None = None


class WordClock:
    def __init__(self, frame_rate: float, chars_per_s: float = CHARS_PER_S) -> None:
        self._frame_rate = frame_rate
        self._frames_per_char = frame_rate / chars_per_s
        self._words: list[_Word] = []
        self._pending = ""  # text after the last whitespace: a word that may go on
        self._pending_from = 0  # the frame at which its first character came
        self._num_sent = 0
        self._num_placed = 0  # words with a start and an end
        self._clock = 0.0  # frames: where the next word starts
        self._limit: int | None = None  # words the current segment may place (None: all)

    def add_text(self, text: str, frame: int) -> None:
        """More text, which reached the LM when the stream had `frame` frames."""
        if not self._pending:
            self._pending_from = frame
        pieces = re.split(r"(\s+)", self._pending + text)
        self._pending = pieces[-1]  # after the last whitespace (or all of it, with none)
        for word in pieces[:-1:2]:
            if word:
                self._words.append(_Word(word, self._pending_from))
            self._pending_from = frame
        if not self._pending:
            self._pending_from = frame

    def close_text(self) -> None:
        """No more text: the word being written is whole."""
        if self._pending:
            self._words.append(_Word(self._pending, self._pending_from))
        self._pending = ""

    def start_segment(self, first_frame: int, text: str) -> None:
        """A segment whose text is `text` starts at `first_frame`: only its words are placed until it ends."""
        self._clock = max(self._clock, float(first_frame))
        self._limit = min(len(self._words), self._num_placed + len(_WORD.findall(text)))

    def end_segment(self, end_frame: int) -> None:
        """The current segment's audio ended at `end_frame` (its end of speech): fit its words into it."""
        limit = len(self._words) if self._limit is None else self._limit
        self._fit(limit, float(end_frame))
        self._clock = max(self._clock, float(end_frame))
        self._limit = self._num_placed  # nothing more until the next segment starts

    def end(self, end_frame: int, is_cut: bool) -> None:
        """The stream's audio ended at `end_frame`: by the model's end of speech (fit every word left), or cut
        by its length limit (`is_cut`: only the words that started before the cut, clipped to it)."""
        if is_cut:
            self._place_due(float("inf"), cut_frame=float(end_frame))
            for word in self._words[self._num_sent:self._num_placed]:
                word.end = min(word.end, float(end_frame))
            del self._words[self._num_placed:]  # never spoken
            return
        self.close_text()
        self._limit = None
        self._fit(len(self._words), float(end_frame))

    def due(self, end_frame: int) -> list[WordTime]:
        """The words spoken by frame `end_frame` not sent before (each word is sent once)."""
        self._place_due(float(end_frame))
        words = [w for w in self._words[self._num_sent:self._num_placed] if w.end <= end_frame + 1e-9]
        self._num_sent += len(words)
        rate = self._frame_rate
        return [WordTime(w.text, w.start / rate, w.end / rate) for w in words]

    def _place_due(self, end_frame: float, cut_frame: float | None = None) -> None:
        """Place, at the speaking rate, the words that end by `end_frame` (all of them with inf)."""
        limit = len(self._words) if self._limit is None else self._limit
        while self._num_placed < limit:
            word = self._words[self._num_placed]
            start = max(self._clock, float(word.earliest))
            end = start + (len(word.text) + 1) * self._frames_per_char
            if end > end_frame or (cut_frame is not None and start >= cut_frame):
                break
            word.start, word.end, self._clock = start, end, end
            self._num_placed += 1

    def _fit(self, limit: int, end_frame: float) -> None:
        """Place words up to `limit` between the clock and `end_frame`, each in proportion to its length but at no
        less than half the speaking rate (more room is the pause after them); a word's arrival frame still bounds
        its start where the room allows."""
        words = self._words[self._num_placed:limit]
        if not words:
            return
        start = min(self._clock, end_frame)
        weights = [len(w.text) + 1 for w in words]
        per = min((end_frame - start) / sum(weights), MAX_STRETCH * self._frames_per_char)
        for word, weight in zip(words, weights):
            word.start = min(max(start, float(word.earliest)), end_frame)
            word.end = max(word.start, min(end_frame, word.start + weight * per))
            start = word.end
        self._clock = max(self._clock, start)
        self._num_placed = limit
