"""Streamed text (`voxlane bench --text-rate`): each request's text in token-like pieces sent at an LLM's
pace, and which of that text a chunk of audio needs.

The client has no tokenizer. A text is cut with a GPT-2-style pre-tokeniser (a word with the space
before it, a number, a run of punctuation, a run of whitespace) and each pre-token counts as one token.
The model's BPE (Qwen2's, for Qwen3-TTS) gives about one token per such pre-token on English prose; a
rare word splits into several and a number into one per digit, so the count approximates the model's.

What a chunk needs (Qwen3-TTS): prefill takes the text's first token and every frame adds one trailing
text token, so frame f is decoded once tokens 0..f+1 are final (the LM waits for them), and the server
takes a token as final only when the next one has begun or the text is closed (the last word may still
grow). A chunk of frames [a, b) therefore needs pieces 0..b+1 sent, or the text's close when it has
b + 1 pieces or fewer.
"""
from __future__ import annotations

import math
import re
from typing import Sequence

# GPT-2's pattern in Python's `re`: `[^\W\d_]` stands for \p{L}, `\d` for \p{N}; every character falls in
# one alternative, so the pieces join back to the text exactly.
PRE_TOKEN = re.compile(r"'(?:s|t|re|ve|m|ll|d)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+")
# frames [a, b) need text tokens 0..b, and token b counts only once the piece after it is sent
PIECES_AFTER_END_FRAME = 2


def cut_pieces(text: str) -> list[str]:
    """`text` as pre-tokens, in order (one piece per token); `"".join` gives `text` back."""
    return PRE_TOKEN.findall(text)


def piece_offsets(num_pieces: int, text_rate: float) -> list[float]:
    """Seconds after the start at which each piece goes out: piece k at k / text_rate."""
    return [k / text_rate for k in range(num_pieces)]


def text_sent_by(piece_sent_s: Sequence[float], text_closed_s: float | None, end_frame: int) -> float:
    """When the text that a chunk of frames [a, `end_frame`) needs had been sent; inf if it never was."""
    needed = end_frame + PIECES_AFTER_END_FRAME
    if needed <= len(piece_sent_s):
        return piece_sent_s[needed - 1]
    return math.inf if text_closed_s is None else text_closed_s
