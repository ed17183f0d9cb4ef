"""The one wire form of an error: a bracketed code, then the message.

Triton 2.51 carries a stream's error as a message string only, so the reason travels at its start:

    [lane_down] the codec lane is down: its process died and it was unloaded; ...
    [bad_input param=voice code=unknown_voice] unknown voice 'x'; known voices: ['tiny']
    [overloaded] server overloaded: 128 requests already wait for the LM lane; retry later

The code is an `EndReason` value; `param=` and `code=` (words: letters, digits, `_`, `.`, `-`)
are optional fields of bad input. Every error VoxLane's models send is written by `encode_error`;
`decode_error` is its one reader. A message without the prefix is Triton's own: it refused the
request against the model config (wrong dtype, shape or input name) before any VoxLane code ran,
and is read as bad input, unless it is one of Triton's refusals of a model it cannot serve now (the
server is stopping, the model is unloaded or loading, its stub process died): those are LANE_DOWN, so that the request is
tried elsewhere (a 503 behind the gateway), never a 400.
"""
from __future__ import annotations

import re

from protocol.reasons import Ended, EndReason

_FIELDS = ("param", "code")
_WORD = r"[\w.-]+"
_PREFIX = re.compile(rf"^\[(\w+)((?: \w+={_WORD})*)\] ")
_VALUE = re.compile(rf"^{_WORD}$")
# Triton 2.51's own words for a model it cannot serve now: read here, at the boundary, into a reason
# ("is not ready": a BLS call to a model being loaded again, as after its stub died)
_TRITON_UNAVAILABLE = ("Request for unknown model", "Server not ready", "is not at ready state", "is not ready")
# a request to a model whose Python process died ("Stub process 'vox_ensemble_0_0' is not healthy."): no stop, a
# death (the router's BLS boundary reads it apart, to heal the lane); to a client it is unavailable all the same
_TRITON_STUB_DIED = "is not healthy"
_TRITON_STOPPING = "Server is stopping"  # the frontend's refusal of a request (an ack too) after SIGTERM


def encode_error(ended: Ended) -> str:
    """`ended` as a Triton error message."""
    fields = {name: value for name in _FIELDS if (value := getattr(ended, name)) is not None}
    for name, value in fields.items():
        if not _VALUE.match(value):
            raise ValueError(f"{name} {value!r} is not a word the wire form can carry")
    return f"[{ended.reason.value}{''.join(f' {k}={v}' for k, v in fields.items())}] {ended.message}"


def is_triton_unavailable(text: str) -> bool:
    """Whether an uncoded error is Triton's refusal of a model it cannot serve now (stopping, unloaded)."""
    return _TRITON_STOPPING in text or any(words in text for words in _TRITON_UNAVAILABLE)


def is_encoded(text: str) -> bool:
    """Whether `text` was written by `encode_error` (VoxLane's own error, not Triton's)."""
    match = _PREFIX.match(text)
    return match is not None and match.group(1) in _REASONS


def decode_error(text: str) -> Ended:
    """The `Ended` a Triton error message carries (see the module docstring for uncoded messages)."""
    match = _PREFIX.match(text)
    if match is None or match.group(1) not in _REASONS:
        if _TRITON_STOPPING in text:
            return Ended(EndReason.LANE_DOWN, f"the server is shutting down; retry on another server: {text}")
        if is_triton_unavailable(text) or _TRITON_STUB_DIED in text:
            return Ended(EndReason.LANE_DOWN, "the server cannot serve the model now (it is shutting down, or "
                                              f"the model is being reloaded); retry on another server: {text}")
        return Ended(EndReason.REFUSED_BAD_INPUT, text)
    fields = dict(pair.split("=", 1) for pair in match.group(2).split())
    return Ended(_REASONS[match.group(1)], text[match.end():], fields.get("param"), fields.get("code"))


_REASONS = {reason.value: reason for reason in EndReason}
