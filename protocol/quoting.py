"""How an error message quotes a value it refuses: its repr, cut to a bounded length.

A refused value can be as long as the request allows (a 10 000-character voice name); echoed whole,
it would bury the message and copy the client's data into every log line that carries it.
"""
from __future__ import annotations

MAX_QUOTE_CHARS = 80


def quoted(value: object, limit: int = MAX_QUOTE_CHARS) -> str:
    """`repr(value)`, or its first characters and the full length when longer than `limit`."""
    text = repr(value)
    if len(text) <= limit:
        return text
    size = f" ({len(value)} characters)" if isinstance(value, (str, bytes)) else ""
    return f"{text[:limit - 1]}…{size}"
