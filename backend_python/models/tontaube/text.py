"""TontaubeV1's text side: ids one a character, the system tag, text segments and the window each model reads.

Text reaches the models a character at a time: each character is the first id its tokenizer gives it alone (a
character the byte-level BPE splits keeps only its first piece), except `<|…|>` special tokens (kept as their
id; an unknown one is dropped, as the reference drops it), `<<…>>` and `||` spans and anything inside an
`<|im_start|>…<|im_end|>` block, which are tokenized as BPE text. The system tag (`<|im_start|>english :
audiobook<|im_end|>\\n`) names the language and the style. A long text is cut into segments of at most 350
characters; the semantic model reads a segment with its neighbours (the next one cut to 50 characters), a
refiner its own segment only; a segment after the first starts with a space, the request's last ends with a
newline, and the segments of a window are joined by the text marker.
"""
from __future__ import annotations

import re
from functools import lru_cache

SPECIAL_SPANS = re.compile(r"(<\|[^|]+\|>|<<[^>]+>>|\|\|)")
TEXT_MARKER, AUDIO_MARKER, END_OF_SPEECH = "<|text_split|>", "<|audio_split|>", "<|end_of_speech|>"
PAD = "<|endoftext|>"
IM_START, IM_END = "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = (PAD, END_OF_SPEECH, TEXT_MARKER, AUDIO_MARKER, IM_START, IM_END)
LANGUAGES = ("english", "german", "spanish", "french", "italian", "dutch", "portuguese")
STYLES = ("audiobook", "conversational", "agentic")
MAX_SEGMENT_CHARS = 350
LOOKAHEAD_CHARS = 50
_CUT_AFTER = ".!?;:,"


class TextTokenizer:
    """Character ids over a `tokenizers.Tokenizer` (an official bundle's tokenizer.json, or the tiny one)."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self._char_id = lru_cache(maxsize=None)(self._first_id)

    def special(self, token: str) -> int:
        token_id = self.tokenizer.token_to_id(token)
        if token_id is None:
            raise ValueError(f"the tokenizer has no {token!r}")
        return token_id

    def ids(self, text: str) -> list[int]:
        out, in_block = [], False
        for part in SPECIAL_SPANS.split(text):
            if part.startswith("<|") and part.endswith("|>"):
                token_id = self.tokenizer.token_to_id(part)
                if token_id is not None:
                    out.append(token_id)
                in_block = part == IM_START or (in_block and part != IM_END)
            elif in_block or part == "||" or (part.startswith("<<") and part.endswith(">>")):
                out += self.tokenizer.encode(part, add_special_tokens=False).ids
            else:
                out += [self._char_id(ch) for ch in part]
        return out

    def _first_id(self, char: str) -> int:
        return self.tokenizer.encode(char, add_special_tokens=False).ids[0]


def system_tag(language: str = "english", style: str = "audiobook") -> str:
    language, style = language.strip().lower(), style.strip().lower()
    if language not in LANGUAGES or style not in STYLES:
        raise ValueError(f"language must be one of {LANGUAGES} and style one of {STYLES}, "
                         f"got {language!r} and {style!r}")
    return f"{IM_START}{language} : {style}{IM_END}\n"


def split_segments(text: str, max_chars: int = MAX_SEGMENT_CHARS) -> list[str]:
    """`text` in segments of at most `max_chars`: cut after the last punctuation inside the limit, else at the
    last whitespace, else at the limit."""
    segments, rest = [], text.strip()
    while len(rest) > max_chars:
        head = rest[:max_chars]
        cut = max(head.rfind(ch) for ch in _CUT_AFTER) + 1
        if cut <= 0:
            cut = max(head.rfind(" "), head.rfind("\n"))
        cut = cut if cut > 0 else max_chars
        segments.append(rest[:cut].strip())
        rest = rest[cut:].strip()
    return segments + ([rest] if rest else [])


def window(segments: list[str], index: int, with_neighbours: bool, tag: str = "") -> str:
    """The text a model reads for segment `index`: with its neighbours (the semantic model) or alone."""
    n = len(segments)
    if not with_neighbours:
        start, end = index, index + 1
    else:
        start, end = (0, min(2, n)) if index == 0 else (index - 1, min(index + 2, n))
    parts = [s.strip() for s in segments[start:end]]
    for i in range(index - start + 1, len(parts)):  # what follows is a glimpse: its first 50 characters
        if len(parts[i]) > LOOKAHEAD_CHARS:
            cut = parts[i].rfind(" ", 0, LOOKAHEAD_CHARS)
            parts[i] = parts[i][:cut] if cut > 0 else parts[i][:LOOKAHEAD_CHARS]
    marked = [(" " if start + i > 0 else "") + p + ("\n" if start + i == n - 1 else "") for i, p in enumerate(parts)]
    return tag + TEXT_MARKER.join(marked)


def tiny_tokenizer():
    """A byte-level BPE with no merges (each byte its own id, 0..255) and the special tokens after them: the
    tiny preset's tokenizer, which keeps the reference's "first id of a character" rule meaningful."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    byte_chars = sorted(alphabet, key=lambda ch: _byte_of(ch))
    tokenizer = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(byte_chars)}, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS))
    return tokenizer


@lru_cache(maxsize=1)
def _byte_table() -> dict[str, int]:
    """GPT-2's byte -> printable character map, inverted."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def _byte_of(char: str) -> int:
    return _byte_table()[char]
