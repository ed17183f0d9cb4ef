"""Which of a request's frames go to the codec now, and with what left context.

The chunk plan (protocol/chunks.py, sized by scheduler/chunking.py) says where chunks end; a segmented text's
segments each start the plan anew from their first frame (`SegmentCursor.chunks_from`), numbered on from the
stream's chunks before.
A chunk's window holds up to `left_context_frames` of the request's own frames before its new ones, and,
while those do not fill it, the codec prefix's last `left_context_frames` (an in-context clone's reference
codes, before frame 0: all that chunk 0 had), so a window sees the whole history a codec lane's stream state
saw and the two paths give the same audio.

A codec with lookahead (CodecWindowing.lookahead_frames R) gets a chunk only once the R frames after it exist,
or its request or segment has ended (then with what there is); its window holds them after its new frames, and
the codec returns min(overlap, lookahead) frames of audio past the new ones for the server to cross-fade into
the next chunk (vox_ensemble/overlap_join.py).
"""
from __future__ import annotations

import torch

import dataclasses

from backend_python.engine.sequence import Chunk, Sequence
from backend_python.models.base import CodecWindowing
from scheduler import ChunkingConfig, ChunkPlan


class ChunkCutter:
    def __init__(self, chunking: ChunkingConfig | ChunkPlan, windowing: CodecWindowing | int) -> None:
        if isinstance(windowing, int):
            windowing = CodecWindowing(windowing)
        self._chunking = chunking if isinstance(chunking, ChunkingConfig) else None
        self._plans = {} if self._chunking is not None else None
        self._plan, self._left = (chunking if isinstance(chunking, ChunkPlan) else ChunkPlan(chunking),
                                  windowing.left_context_frames)
        self._ahead, self._overlap = windowing.lookahead_frames, windowing.overlap_frames

    def cut(self, seq: Sequence, is_finished: bool, is_done: bool,
            condition: torch.Tensor | None = None) -> list[Chunk]:
        """The chunks ready now; with `is_finished` (the request or its segment ended, or a segment waits at
        its limit) the frames after the last complete chunk too. `is_done`: the request is over (its final
        chunk is marked last). `condition`: the stream's codec condition, carried by each chunk."""
        chunks, (first_frame, first_chunk) = [], seq.segment.chunks_from
        num_frames = seq.num_frames - first_frame
        next_index, plan = seq.num_chunks - first_chunk, self._plan_for(seq)
        usable = (num_frames if is_finished  # else only chunks whose lookahead exists
                  else max(num_frames - self._ahead, min(num_frames, plan.start(next_index))))
        for span in plan.ready_chunks(usable, next_index, is_finished):
            start, end = span.start + first_frame, span.end + first_frame
            tokens, context = self.window(seq, start, end)
            lookahead = tokens.shape[0] - context - (end - start)
            chunks.append(Chunk(first_chunk + span.index, tokens, context, start_frame=start,
                                is_last=span.is_last and is_done, lookahead_frames=lookahead,
                                overlap_frames=min(self._overlap, lookahead), condition=condition))
            seq.num_chunks = first_chunk + span.index + 1
        return chunks

    def _plan_for(self, seq: Sequence) -> ChunkPlan:
        """The request's plan: the engine's, or the same with the first chunk and chunk chosen for it at
        admission (`ChunkingConfig.for_stream`)."""
        if self._chunking is None:
            return self._plan
        key = (seq.first_chunk_frames or self._chunking.first_chunk_frames, seq.chunk_frames or self._chunking.chunk_frames)
        if key == (self._chunking.first_chunk_frames, self._chunking.chunk_frames):
            return self._plan
        if key not in self._plans:
            self._plans[key] = ChunkPlan(dataclasses.replace(self._chunking, first_chunk_frames=key[0],
                                                             chunk_frames=key[1]))
        return self._plans[key]

    def window(self, seq: Sequence, start: int, end: int) -> tuple[torch.Tensor, int]:
        """Frames [start, end) after their left context and before up to `lookahead_frames` of the frames after
        them (as many as exist) -> (tokens [context + new + lookahead, K] int64, context)."""
        own = min(self._left, start)
        tokens = torch.stack(seq.frames[start - own: min(end + self._ahead, seq.num_frames)])
        num_prefix = 0 if seq.codec_prefix is None or start >= self._left else min(self._left, seq.codec_prefix.shape[0])
        if num_prefix:
            tokens = torch.cat((seq.codec_prefix[-num_prefix:].to(tokens.dtype), tokens))
        return tokens, own + num_prefix
