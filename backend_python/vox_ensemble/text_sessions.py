"""Streaming-text sessions: which live stream a text piece reaches, and each piece checked as it comes.

A session is a Triton sequence on `vox_ensemble` (protocol.tensors: SEQUENCE_START): its first request
opens it and starts the stream, each later request with the same `sequence_id` is a piece of its text,
and the one with the sequence-end flag closes the text. A piece's bytes are decoded as part of the
whole text (a UTF-8 character may be split across pieces); a bad piece (invalid UTF-8, a control
character, the whole text over `max_text_chars`, a character left unfinished at the close) is
refused and changes nothing, so the client may send it again mended. Every refusal's `code` is one
of PIECE_ERROR_CODES.
"""
from __future__ import annotations

import codecs
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from backend_python.stub_common.request_inputs import RequestError, control_character
from protocol.quoting import quoted

_NUM_ENDED_KEPT = 4096  # ended sessions remembered, so that a late piece hears "ended", not "unknown"


@dataclass
class TextSession:
    session_id: object  # the sequence id (an int or a string)
    stream_id: str
    max_chars: int
    num_chars: int = 0
    num_pieces: int = 0  # piece 0 is the first request's text
    is_closed: bool = False
    decoder: codecs.IncrementalDecoder = field(default_factory=lambda: codecs.getincrementaldecoder("utf-8")())

    def decode(self, data: bytes, is_final: bool) -> str:
        """The piece's text; raises RequestError (and forgets the piece) when it is bad."""
        state = self.decoder.getstate()
        try:
            text = self._checked(self.decoder.decode(data, final=is_final), state)
        except (UnicodeDecodeError, RequestError) as exc:
            self.decoder.setstate(state)
            raise self._refusal(exc, len(state[0])) from None
        self.num_chars += len(text)
        self.num_pieces += 1
        self.is_closed = is_final
        return text

    def _checked(self, text: str, state) -> str:
        if (bad := control_character(text)) is not None:
            raise RequestError(f"contains control character U+{ord(bad):04X}")
        if self.num_chars + len(text) > self.max_chars:
            raise RequestError(f"would make the text {self.num_chars + len(text)} characters long; "
                               f"the limit is {self.max_chars}")
        return text

    def _refusal(self, exc: Exception, num_carried: int) -> RequestError:
        where = f"piece {self.num_pieces} of session {quoted(self.session_id)}"
        if isinstance(exc, UnicodeDecodeError):
            detail = ("ends inside a UTF-8 character" if exc.reason == "unexpected end of data"
                      else f"is not valid UTF-8 (byte {max(0, exc.start - num_carried)} of the piece)")
        else:
            detail = str(exc)
        return RequestError(f"{where} {detail}; the piece is refused, the session goes on", param="text",
                            code="bad_piece")


class Sessions:
    """Live sessions of one kind by sequence id, and the latest ended ones (`param`: the input their pieces carry)."""

    param = "text"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: dict[object, object] = {}
        self._ended: OrderedDict[object, None] = OrderedDict()

    def knows(self, session_id: object) -> bool:
        """A live session, or one of the latest ended ones."""
        with self._lock:
            return session_id in self._live or session_id in self._ended

    def check_live(self, session_id: object) -> None:
        """Raises the RequestError of a piece for `session_id` when no live session has it."""
        with self._lock:
            if session_id not in self._live:
                raise self._not_live(session_id)

    def end(self, session_id: object) -> None:
        """The session's stream ended: later pieces are refused as the pieces of an ended session."""
        with self._lock:
            if self._live.pop(session_id, None) is not None:
                self._ended[session_id] = None
                while len(self._ended) > _NUM_ENDED_KEPT:
                    self._ended.popitem(last=False)

    def _not_live(self, session_id: object) -> RequestError:
        if session_id in self._ended:
            return RequestError(f"session {quoted(session_id)} has ended (its stream is over); the piece is "
                                f"refused", param=self.param, code="session_ended")
        return RequestError(f"no live session has sequence_id {quoted(session_id)}: open one with the "
                            f"sequence-start flag first", param=self.param, code="unknown_session")


class TextSessions(Sessions):
    """Live streaming-text sessions."""

    def __init__(self, max_chars: int) -> None:
        super().__init__()
        self._max_chars = max_chars

    def open(self, session_id: object, stream_id: str, data: bytes) -> str:
        """Start session `session_id` with its first text; its decoded text. Raises RequestError."""
        if not session_id:
            raise RequestError("a streaming-text session needs a sequence_id (non-zero)", param="text")
        with self._lock:
            if session_id in self._live:
                raise RequestError(f"session {quoted(session_id)} is already live; a sequence_id names one "
                                   f"session at a time", param="text")
            session = TextSession(session_id, stream_id, self._max_chars)
            try:
                text = session.decode(data, is_final=False)
            except RequestError as exc:  # the first request is refused whole: no piece code
                raise RequestError(str(exc).replace("; the piece is refused, the session goes on", ""),
                                   param="text") from None
            self._live[session_id] = session
            self._ended.pop(session_id, None)
        return text

    def take(self, session_id: object, data: bytes, is_final: bool) -> tuple[str, str]:
        """A later piece: (its stream id, its text). Raises RequestError naming why it is refused."""
        with self._lock:
            session = self._live.get(session_id)
            if session is None:
                raise self._not_live(session_id)
            if session.is_closed:
                raise RequestError(f"session {quoted(session_id)}'s text is closed (its sequence_end came); "
                                   f"the piece is refused", param="text", code="session_closed")
            return session.stream_id, session.decode(data, is_final)


def piece_bytes(array: np.ndarray | None) -> bytes:
    """A request's `text` as raw bytes ([1] BYTES); absent: empty."""
    if array is None:
        return b""
    if array.size != 1:
        raise RequestError(f"input 'text' must hold exactly one string, got shape {list(array.shape)}",
                           param="text", code="bad_piece")
    value = array.reshape(-1)[0]
    if isinstance(value, str):
        return value.encode("utf-8")
    if not isinstance(value, (bytes, np.bytes_)):
        raise RequestError("input 'text' must be BYTES (UTF-8 text)", param="text", code="bad_piece")
    return bytes(value)
