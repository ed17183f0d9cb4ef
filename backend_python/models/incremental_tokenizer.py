"""Tokenising a text that arrives in pieces, with the ids tokenising the whole text would give.

A Hugging Face tokenizer splits its input at added (special) tokens, normalises it, cuts it into
pre-tokens (words) and then runs its model on each pre-token alone. A pre-token is final once
no continuation of the text can change it, and then so are its ids. The pre-tokenizer's patterns
look ahead only, so a pre-token can change with more text only when its match read up to the end
of the text so far: the last pre-token, and any pre-token inside the whitespace that ends the
text (GPT-2's and Qwen2's `\\s+(?!\\S)` and `\\s*[\\r\\n]+` read whitespace up to the next
non-space). So the ids of every pre-token before both are committed, and the rest waits for
more text or for the close. Two more holds keep the cut safe: a text that ends in a prefix of an
added token (`<|im_` may become `<|im_end|>`), and a cut right before a character that
normalisation (NFC) could join to the one before it.
"""
from __future__ import annotations

import unicodedata


class IncrementalTokenizer:
    """The ids of `prefix + pieces... + suffix`, committed as they become final.

    `tokenizer` is a transformers fast tokenizer (its `backend_tokenizer` does the work) or a
    `tokenizers.Tokenizer`; the ids equal `tokenizer(prefix + text + suffix)["input_ids"]` for
    tokenizers that add no ids of their own (no BOS/EOS post-processing).
    """

    def __init__(self, tokenizer, prefix: str = "") -> None:
        self._backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
        self._added = [token.content for token in self._backend.get_added_tokens_decoder().values()]
        self._pending = ""  # text whose ids are not final yet
        self.ids: list[int] = []  # committed ids, final
        self.is_closed = False
        self.append(prefix)

    @property
    def pending_text(self) -> str:
        """The text whose ids wait for more text (or for the close)."""
        return self._pending

    def append(self, text: str) -> int:
        """Add text; commits what became final and returns how many ids were committed."""
        if self.is_closed:
            raise ValueError("the text is closed")
        # whitespace after whitespace commits nothing (the whitespace at the end waits): no encode, so a
        # long run of space pieces costs O(1) each
        is_idle = text.isspace() and self._pending[-1:].isspace()
        self._pending += text
        return 0 if is_idle or not text else self._commit()

    def close(self, suffix: str = "") -> int:
        """No more text: `suffix` ends it and every id is committed; returns how many."""
        if self.is_closed:
            raise ValueError("the text is closed")
        self.is_closed = True
        text, self._pending = self._pending + suffix, ""
        ids = self._encode(text).ids if text else []
        self.ids.extend(ids)
        return len(ids)

    def strip_pending_end(self) -> None:
        """Drop trailing whitespace of the pending text (what `str.strip` removes from the whole text's end,
        which is always pending: whitespace at the end is never committed)."""
        self._pending = self._pending.rstrip()

    def _commit(self) -> int:
        text = self._pending
        if not text:
            return 0
        encoding = self._encode(text)
        cut = self._cut(text, encoding.word_ids, encoding.offsets)
        if cut == 0:
            return 0
        start = encoding.offsets[cut][0]
        self.ids.extend(encoding.ids[:cut])
        self._pending = text[start:]
        return cut

    def _cut(self, text: str, words: list, offsets: list) -> int:
        """How many leading tokens are final: those before the latest word start that lies before the
        whitespace at the end and any added-token prefix at the end (never the last word); 0 when none."""
        limit = min(len(text.rstrip()), self._added_prefix_start(text))
        starts = [i for i in range(1, len(words)) if words[i] != words[i - 1]]  # token index of each word start
        final = [i for i in starts if offsets[i][0] <= limit and _can_cut_before(text, offsets[i][0])]
        return final[-1] if final else 0

    def _added_prefix_start(self, text: str) -> int:
        """Where a proper prefix of an added token ends the text (it may be completed), else len(text)."""
        for start in range(max(0, len(text) - max((len(a) for a in self._added), default=0)), len(text)):
            tail = text[start:]
            if any(a.startswith(tail) and a != tail for a in self._added):
                return start
        return len(text)

    def _encode(self, text: str):
        return self._backend.encode(text, add_special_tokens=False)


def _can_cut_before(text: str, index: int) -> bool:
    """Whether NFC cannot join text[index] to the character before it, whatever follows."""
    char = text[index]
    if unicodedata.combining(char):
        return False
    pair = text[index - 1:index + 1]
    return unicodedata.normalize("NFC", pair) == unicodedata.normalize("NFC", pair[0]) + unicodedata.normalize("NFC", char)
