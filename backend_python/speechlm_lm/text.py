"""A streaming-text request's text as the LM lane checks it: what the whole text's checks would refuse at the close.

The router checks each piece (UTF-8, control characters, length); the whole text must also hold
something speakable (not only spaces and invisible format characters), which is known at the close.
"""
from __future__ import annotations

from backend_python.models.base import Prompt, TextFeed
from backend_python.stub_common.request_inputs import is_speakable


class SpeakableText(TextFeed):
    """A family's `TextFeed` that refuses, at the close, a text with nothing to speak."""

    def __init__(self, feed: TextFeed) -> None:
        self._feed = feed
        self._has_speech = False

    def append(self, text: str) -> None:
        self._has_speech = self._has_speech or any(is_speakable(c) for c in text)
        self._feed.append(text)

    def close(self) -> None:
        if not self._has_speech:
            raise ValueError("the text is empty or whitespace only")
        self._feed.close()

    @property
    def is_closed(self) -> bool:
        return self._feed.is_closed

    @property
    def num_prompt_tokens(self) -> int:
        return self._feed.num_prompt_tokens

    def prompt(self) -> Prompt | None:
        return self._feed.prompt()

    @property
    def is_segmented(self) -> bool:
        return self._feed.is_segmented

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._feed, name)  # a segmented feed's own interface (models/text_segments.py)
