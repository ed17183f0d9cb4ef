"""Streaming-text requests in the LM's loop: their text pieces, applied between steps, and their idle timeout.

Pieces come from other threads (the LM lane's control requests) and wait here, in order, until the
loop applies them to their request's `TextFeed`. A request whose text is still open and whose
next frame needs a text token that has not arrived is not decoded (the engine asks the model), as
a request paused on its client is not; one whose text gets no piece for its `text_idle_timeout_s`
ends with an error, and so does one whose text turns out bad (empty at the close).
"""
from __future__ import annotations

import threading

from backend_python.engine.sequence import Sequence
from protocol.reasons import Ended, EndReason

TEXT_IDLE_CODE = "text_idle_timeout"  # the `code` of the ending of a request whose text stopped coming


class PieceQueue:
    """Pieces of live requests (text, or an interleaved model's input frames) from other threads, in arrival order,
    until the loop takes them all at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pieces: dict[str, list[tuple[object, bool, float]]] = {}  # by request id, in arrival order

    def add(self, request_id: str, piece: object, is_final: bool, now: float) -> None:
        """Queue a piece that came at `now` (from any thread); one for an id that is not live is dropped."""
        with self._lock:
            self._pieces.setdefault(request_id, []).append((piece, is_final, now))

    def take(self) -> dict[str, list[tuple[object, bool, float]]]:
        with self._lock:
            pieces, self._pieces = self._pieces, {}
        return pieces


class TextPieces(PieceQueue):
    def apply(self, live: list[Sequence]) -> list[tuple[Sequence, Ended]]:
        """Feed the queued pieces to their requests; the requests that must end, and how."""
        pieces = self.take()
        endings = []
        for seq in live:
            if seq.request_id in pieces and seq.is_text_open:
                ended = _feed(seq, pieces[seq.request_id])
                if ended is not None:
                    endings.append((seq, ended))
        return endings


def _feed(seq: Sequence, pieces: list[tuple[str, bool, float]]) -> Ended | None:
    try:
        for text, is_final, seq.text_at in pieces:
            seq.text.append(text)
            if seq.words is not None:
                seq.words.add_text(text, seq.num_frames)
            if is_final:
                seq.text.close()
                if seq.words is not None:
                    seq.words.close_text()
                break
    except ValueError as exc:
        return Ended(EndReason.REFUSED_BAD_INPUT, f"the streamed text is bad: {exc}", param="text")
    if seq.prompt is None:
        seq.prompt = seq.text.prompt()
    return None


def idle_endings(live: list[Sequence], now: float) -> list[tuple[Sequence, Ended]]:
    """Requests whose open text got no piece for their timeout."""
    return [(seq, Ended(EndReason.CANCELLED, f"stream cancelled: its text got no piece for {seq.text_idle_timeout_s:g} s "
                                             f"and was not closed (text_idle_timeout_s)", code=TEXT_IDLE_CODE))
            for seq in live if seq.is_text_open and now >= seq.text_at + seq.text_idle_timeout_s]
