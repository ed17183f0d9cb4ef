"""An interleaved model's input in the LM's loop: its pieces of input frames, applied between steps, and its idle
timeout (as text_pieces.py does for streamed text).

Pieces come from other threads (the LM lane's control requests) and wait here, in order, until the loop appends
them to their request's `InputFeed`. A request whose next frame needs input that has not arrived is not decoded
(the engine asks the model) and keeps its slot; one whose open input gets no piece for its idle timeout ends with
an error, and so does one sent a bad piece (wrong shape, codes out of range, a piece after the close).
"""
from __future__ import annotations

from backend_python.engine.sequence import Sequence
from backend_python.engine.text_pieces import PieceQueue
from protocol.reasons import Ended, EndReason

INPUT_IDLE_CODE = "input_idle_timeout"  # the `code` of the ending of a request whose input stopped coming


class InputPieces(PieceQueue):
    """Each piece: input frames [N, K] int64."""

    def apply(self, live: list[Sequence]) -> list[tuple[Sequence, Ended]]:
        """Append the queued pieces to their requests' inputs; the requests that must end, and how."""
        pieces = self.take()
        endings = []
        for seq in live:
            if seq.request_id in pieces and seq.is_input_open:
                try:
                    for frames, is_final, seq.text_at in pieces[seq.request_id]:
                        seq.prompt.input.append(frames)
                        if is_final:
                            seq.prompt.input.close()
                            break
                except ValueError as exc:
                    endings.append((seq, Ended(EndReason.REFUSED_BAD_INPUT, f"the streamed input is bad: {exc}",
                                               param="input_audio")))
        return endings


def input_idle_endings(live: list[Sequence], now: float) -> list[tuple[Sequence, Ended]]:
    """Requests whose open input got no piece for their timeout."""
    return [(seq, Ended(EndReason.CANCELLED, f"stream cancelled: its input audio got no piece for "
                                             f"{seq.text_idle_timeout_s:g} s and was not closed (input idle timeout)",
                        code=INPUT_IDLE_CODE))
            for seq in live if seq.is_input_open and now >= seq.text_at + seq.text_idle_timeout_s]
