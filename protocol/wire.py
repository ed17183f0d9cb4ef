"""The one wire form of an error: a bracketed code, then the message.

Triton 2.51 carries a stream's error as a message string only, so the reason travels at its start:

    [lane_down] the codec lane is down: its process died and it was unloaded; ...
    [bad_input param=voice code=unknown_voice] unknown voice 'x'; known voices: ['tiny']
    [overloaded] server overloaded: 128 requests already wait for the LM lane; retry later

The code is an `EndReason` value; `param=` and `code=` (words: letters, digits, `_`, `.`, `-`)
are optional fields of bad input. Every error VoxLane's models send is written by `encode_error`;
`decode_error` is its one reader. A message without the prefix is Triton's own: it refused the
request against the model config (wrong dtype, shape or input name) before any VoxLane code ran,
and is read as bad input.
"""
from __future__ import annotations

import re

from protocol.reasons import Ended, EndReason

_FIELDS = ("param", "code")
_WORD = r"[\w.-]+"
_PREFIX = re.compile(rf"^\[(\w+)((?: \w+={_WORD})*)\] ")
_VALUE = re.compile(rf"^{_WORD}$")


def encode_error(ended: Ended) -> str:
    """`ended` as a Triton error message."""
    fields = {name: value for name in _FIELDS if (value := getattr(ended, name)) is not None}
    for name, value in fields.items():
        if not _VALUE.match(value):
            raise ValueError(f"{name} {value!r} is not a word the wire form can carry")
    return f"[{ended.reason.value}{''.join(f' {k}={v}' for k, v in fields.items())}] {ended.message}"


def decode_error(text: str) -> Ended:
    """The `Ended` a Triton error message carries (see the module docstring for uncoded messages)."""
    match = _PREFIX.match(text)
    if match is None or match.group(1) not in _REASONS:
        return Ended(EndReason.REFUSED_BAD_INPUT, text)
    fields = dict(pair.split("=", 1) for pair in match.group(2).split())
    return Ended(_REASONS[match.group(1)], text[match.end():], fields.get("param"), fields.get("code"))


_REASONS = {reason.value: reason for reason in EndReason}
