"""Segmented streamed text in the LM's loop: a family whose prompt needs the whole text
speaks a session's text segment by segment in the request's slot (models/text_segments.py).

A segment ends with the model's end of speech, or at its frame limit: with `ignore_eos` its budget
(its text at a speaking rate), else a cap well past that. Then the next segment's prompt (with the
segment before as context where the family takes it) is prefilled into the same slot and its frames
continue the stream. Whether a segment is the last decides what its limit does (the last one of an
`ignore_eos` request runs on to `max_frames`), so a segment at its limit whose text does not yet say
whether more follows waits for the text, as a frame of a text-fed family waits for its text token: the frames
depend on the text alone, never on when its pieces came.
"""
from __future__ import annotations

import enum

from backend_python.engine.sequence import SegmentCursor, Sequence


class Progress(enum.Enum):
    """Where a request stands after a frame (or a text piece)."""

    GOING = "going"
    WAITING = "waiting"  # at its segment's limit, until the text says whether more follows: send what it holds
    SEGMENT_SPOKEN = "segment_spoken"  # the current segment is over; the next one follows in the same slot
    DONE = "done"


def frame_limit(seq: Sequence) -> int | None:
    """Frames the current segment speaks before it ends by itself; None: no limit of its own (the last
    segment of an `ignore_eos` request runs on to `max_frames`)."""
    if seq.ignore_eos:
        return None if seq.text.is_last else seq.text.budget_frames()
    return seq.text.cap_frames()


def frames_needed(seq: Sequence) -> int:
    """Frames the current segment may take in the slot after its prompt."""
    remaining = seq.max_frames - seq.num_frames
    limit = frame_limit(seq)
    return remaining if limit is None else min(limit, remaining)


def is_blocked(seq: Sequence) -> bool:
    """Between segments, or at its segment's limit before the text says whether more follows."""
    limit = frame_limit(seq)
    launched = seq.segment.num_launched - seq.num_delay_steps  # a delayed family's first steps complete no frame
    return seq.segment.is_over or (limit is not None and launched >= limit)


def after_frame(seq: Sequence, is_eos: bool) -> Progress:
    """Progress after a frame of the current segment was appended (none when `is_eos`)."""
    limit = frame_limit(seq)
    if not is_eos and (limit is None or seq.num_frames - seq.segment.first_frame < limit):
        return Progress.GOING
    return _ending(seq, is_eos)


def settle(seq: Sequence) -> Progress:
    """Progress of a request blocked by its text, after text came: the next segment, the end, or still waiting."""
    if seq.segment.is_over:
        has_more = seq.prompt is not None or not seq.text.is_closed
        return Progress.GOING if has_more else Progress.DONE
    limit = frame_limit(seq)
    if limit is None or seq.num_frames - seq.segment.first_frame < limit:
        return Progress.GOING  # its limit lifted (it turned out the last) or it is not there yet
    progress = _ending(seq, is_eos=False)
    return Progress.GOING if progress is Progress.WAITING else progress  # already waiting


def _ending(seq: Sequence, is_eos: bool) -> Progress:
    """The segment reached its end of speech or its limit."""
    if seq.text.has_next:
        return Progress.SEGMENT_SPOKEN
    if seq.text.is_last:
        return Progress.DONE if is_eos or frame_limit(seq) is not None else Progress.GOING
    return Progress.SEGMENT_SPOKEN if is_eos else Progress.WAITING


def end_segment(seq: Sequence) -> None:
    """The current segment was spoken: the next one (its prompt, once its text is complete) takes the slot."""
    cursor = seq.segment
    seq.text.next_segment(_segment_frames(seq))
    seq.segment = SegmentCursor(index=cursor.index + 1, first_frame=seq.num_frames,
                                chunks_from=(seq.num_frames, seq.num_chunks), is_over=True)
    seq.prompt = seq.text.prompt()


def chunks_sent(seq: Sequence) -> None:
    """A segment waiting at its limit sent the frames it held: its chunk plan starts anew from here."""
    seq.segment.chunks_from = (seq.num_frames, seq.num_chunks)


def start_segment(seq: Sequence) -> None:
    """The next segment's prompt was prefilled into the slot: decode it."""
    seq.segment.is_over = False


def _segment_frames(seq: Sequence):
    import torch

    frames = seq.frames[seq.segment.first_frame:]
    return torch.stack(frames) if frames else torch.zeros(0, 0, dtype=torch.long)  # [T, K] int64
