"""An interleaved model's input in the LM's loop: its pieces of input frames, applied between steps, and its idle
timeout (as text_pieces.py does for streamed text).

Pieces come from other threads (the LM lane's control requests) and wait here, in order, until the loop appends
them to their request's `InputFeed`. A request whose next frame needs input that has not arrived is not decoded
(the engine asks the model) and keeps its slot; one whose open input gets no piece for its idle timeout ends with
an error, and so does one sent a bad piece (wrong shape, codes out of range, a piece after the close), and one
whose output reached its `max_audio_seconds` while its input went on (the input past the cap is never heard: the
client is told, not left to find its output short).
"""
from __future__ import annotations

from backend_python.engine.sequence import Sequence
from backend_python.engine.text_pieces import PieceQueue
from protocol.reasons import Ended, EndReason

INPUT_IDLE_CODE = "input_idle_timeout"  # the `code` of the ending of a request whose input stopped coming
# the `code` of the ending of a request whose output reached its audio cap with input still to answer
INPUT_PAST_CAP_CODE = "input_past_max_audio_seconds"


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


def past_cap_ending(seq: Sequence, frame_rate: float) -> Ended | None:
    """How a stream that is done ends: None (as usual), or, for an interleaved stream whose output stopped at
    its `max_audio_seconds` with input it had not answered (more frames came, or its input is still open), an
    error that says how much input went unheard and what to send instead."""
    feed = seq.prompt.input if seq.prompt is not None else None
    if feed is None or not seq.is_length_capped or (feed.is_closed and feed.num_frames <= seq.num_frames):
        return None
    cap_s, heard_s = seq.max_frames / frame_rate, feed.num_frames / frame_rate
    still = "and more was coming" if not feed.is_closed else "in all"
    return Ended(EndReason.REFUSED_BAD_INPUT,
                 f"the output reached the session's max_audio_seconds ({cap_s:g} s) while its input went on "
                 f"({heard_s:.2f} s had come {still}): input past {cap_s:g} s is not answered; open the session "
                 f"with a max_audio_seconds as long as its input", param="max_audio_seconds", code=INPUT_PAST_CAP_CODE)
