"""What a step's codes become: frames, chunks with their words, and what each stream's sink gets.

A row's codes become its frames (a delayed family's through its FrameAssembler: models/delay_pattern.py, so
frames, chunks and limits count complete frames only); the chunk cutter cuts the ones ready (chunk_cutter.py), the
word clock names the words they speak (word_clock.py), and the sink takes them. In the time-sharing mode
(`timeshare`) the chunks are decoded to audio here first, in one batch, a cascade's refined first
(inline_codec.py). The stage also ends requests: every sink's `finish` goes through `finish`.
"""
from __future__ import annotations

import logging
from dataclasses import replace
from typing import Callable

import torch

from backend_python.engine import segments
from backend_python.engine.chunk_cutter import ChunkCutter
from backend_python.engine.codec_runner import CodecRunner
from backend_python.engine.config import EngineConfig
from backend_python.engine.inline_codec import InlineCodec
from backend_python.engine.input_pieces import past_cap_ending
from backend_python.engine.launched_step import LaunchedStep
from backend_python.engine.segments import Progress
from backend_python.engine.sequence import Chunk, Sequence, SeqStatus
from backend_python.models.base import Codec, CodecWindowing, SpeechLM
from backend_python.models.delay_pattern import FrameAssembler
from protocol.reasons import Ended, EndReason

log = logging.getLogger("voxlane.engine")


class OutputStage:
    def __init__(self, model: SpeechLM, config: EngineConfig, clock: Callable[[], float],
                 codec: Codec | CodecRunner | None = None, refiner=None) -> None:
        """`codec` set: chunks leave with their audio, decoded here (and refined first by a cascade's `refiner`);
        else they leave as codes for the codec lanes."""
        self._model = model
        self._clock = clock
        self.inline = InlineCodec(codec, refiner, model.device)
        self._chunks = ChunkCutter(config.scheduler.chunking, CodecWindowing(
            config.codec_left_context_frames, config.codec_lookahead_frames, config.codec_overlap_frames))

    # ---- a stream's codes start ----------------------------------------------------
    def start(self, seq: Sequence) -> None:
        """A prompt was prefilled into `seq`'s slot: a delayed family's codes start their delay pattern anew, and
        a segmented stream's word clock learns where the segment starts, and its words."""
        pattern = self._model.delay_pattern
        seq.assembler = None if pattern is None else FrameAssembler(pattern)
        if seq.words is not None and seq.is_segmented:
            seq.words.start_segment(seq.segment.first_frame, seq.text.current_text)

    # ---- codes to frames -----------------------------------------------------------
    def take(self, step: LaunchedStep, codes: torch.Tensor, is_eos: torch.Tensor) -> list[tuple[Sequence, Progress]]:
        """Append each row's frames of a step to its stream; where each stream stands. A row whose request ended
        while the step ran (overlapped), or whose segment has ended, was a spare row: it is skipped."""
        progress = []
        for row, seq in enumerate(step.rows):
            if seq.status is SeqStatus.FINISHED or seq.segment.index != step.segments[row]:
                continue
            progress.append((seq, self._advance_step(seq, codes[row], is_eos[row])))
        return progress

    def _advance_step(self, seq: Sequence, codes: torch.Tensor, is_eos: torch.Tensor) -> Progress:
        """Take a step's frames for one row up to its first end of speech or until the request is no longer
        going (a delayed family's first steps take none)."""
        progress = Progress.GOING
        for frame, eos in step_frames(seq, codes, is_eos):
            progress = _advance(seq, frame, eos)
            if progress is not Progress.GOING:
                break
        return progress

    # ---- frames to chunks, chunks to sinks -----------------------------------------
    def emit(self, progress: list[tuple[Sequence, Progress]]) -> None:
        """Cut and deliver the chunks that are ready; move spoken segments on; finish what is done."""
        self._deliver([(seq, self._for_refinement(seq, chunk)) for seq, p in progress for chunk in self._cut(seq, p)])
        for seq, p in progress:
            if p is Progress.SEGMENT_SPOKEN:
                segments.end_segment(seq)
            elif p is Progress.WAITING:
                segments.chunks_sent(seq)
            elif p is Progress.DONE:
                self.finish(seq, past_cap_ending(seq, self._model.frame_rate))

    def _cut(self, seq: Sequence, progress: Progress) -> list[Chunk]:
        chunks = self._chunks.cut(seq, is_finished=progress is not Progress.GOING, is_done=progress is Progress.DONE,
                                  condition=self._condition(seq))
        return timed(seq, progress, chunks)

    def _condition(self, seq: Sequence) -> torch.Tensor | None:
        """The stream's codec condition (a flow decoder's speaker embedding) from its current prompt."""
        if seq.prompt is not None:
            seq.codec_condition = self._model.codec_condition(seq.prompt)
        return seq.codec_condition

    def _for_refinement(self, seq: Sequence, chunk: Chunk) -> Chunk:
        """A cascade's chunk carries its stream's context for the refinement lane (SpeechLM.refine_context)."""
        context = self._model.refine_context(seq.prompt) if seq.prompt is not None else None
        return chunk if context is None else replace(chunk, refine_context=context,
                                                     segment_start=seq.segment.first_frame)

    def _deliver(self, ready: list[tuple[Sequence, Chunk]]) -> None:
        """Hand chunks to their sinks; with an inline codec, decode them first in one batch."""
        if self.inline.codec is not None and ready:
            ready = self._decode_inline(ready)
        for seq, chunk in ready:
            if seq.t_first_emitted is None:
                seq.t_first_emitted = self._clock()
                if chunk.chunk_index == 0 and seq.t_admitted is not None and seq.t_prefilled is not None:
                    chunk = replace(chunk, first_stamps=(seq.arrival_time, seq.t_admitted, seq.t_prefilled,
                                                         seq.t_first_emitted))
            seq.emitted_frames = chunk.start_frame + chunk.num_new_frames
            try:
                seq.sink.emit(chunk)
            except Exception as exc:  # the client is gone: stop generating for it, keep the others
                log.warning("sending a chunk of %s failed, dropping it: %s", seq.request_id, exc)
                seq.is_cancelled = True

    def _decode_inline(self, ready: list[tuple[Sequence, Chunk]]) -> list[tuple[Sequence, Chunk]]:
        """The chunks with their audio; a failed decode ends their requests (and delivers nothing)."""
        try:
            return self.inline.decode(ready)
        except (RuntimeError, ValueError) as exc:
            log.exception("inline codec decode failed")
            for seq, _ in ready:
                self.finish(seq, f"codec failed: {exc}")
            return []

    # ---- ends ----------------------------------------------------------------------
    def finish(self, seq: Sequence, error: str | EndReason | Ended | None) -> None:
        """End `seq` (once): its sink learns how; a stream that ended early keeps no inline codec state."""
        if seq.status is SeqStatus.FINISHED:
            return
        seq.status = SeqStatus.FINISHED
        if error is not None:
            self.inline.release_stream(seq.request_id)
        try:
            seq.sink.finish(error)
        except Exception as exc:  # a dead client must not take the loop with it
            if seq.is_cancelled:  # its sink already failed (the router died): said once, no trace
                log.warning("finishing %s failed too: %s", seq.request_id, exc)
            else:
                log.exception("finishing %s failed", seq.request_id)


def _advance(seq: Sequence, frame: torch.Tensor | None, is_eos: bool) -> Progress:
    """Append the step's frame; where the request stands."""
    if not is_eos:
        seq.frames.append(frame)
    if seq.is_length_capped:
        return Progress.DONE
    if seq.is_segmented:
        return segments.after_frame(seq, is_eos)
    return Progress.DONE if is_eos else Progress.GOING


def step_frames(seq: Sequence, codes: torch.Tensor, is_eos: torch.Tensor) -> list[tuple[torch.Tensor | None, bool]]:
    """A row's frames in order, each with whether it is the end of speech (no audio): one ([K] codes), several
    from a multi-token model ([M, K], is_eos [M]), or the complete frames a delayed family's row releases and,
    once its last codebook closed, the end (models/delay_pattern.py)."""
    if seq.assembler is not None:
        assembled = seq.assembler.push(codes, bool(is_eos))
        return [(frame, False) for frame in assembled.frames] + ([(None, True)] if assembled.is_closed else [])
    if codes.dim() == 1:
        return [(codes, bool(is_eos))]
    return list(zip(codes, is_eos.tolist()))


def timed(seq: Sequence, progress: Progress, chunks: list[Chunk]) -> list[Chunk]:
    """The chunks with the words they speak, for a stream that asked for them (word_clock.py)."""
    clock = seq.words
    if clock is None:
        return chunks
    if progress is Progress.SEGMENT_SPOKEN:
        clock.end_segment(seq.num_frames)
    elif progress is Progress.DONE:
        clock.end(seq.num_frames, is_cut=seq.is_length_capped)
    return [replace(chunk, words=tuple(clock.due(chunk.start_frame + chunk.num_new_frames))) for chunk in chunks]
