"""The time-sharing mode's codec and refiner, run inline by the LM lane's output stage (no codec lanes).

In `timeshare` the LM lane decodes its own chunks, in one batch per step, between its decode steps; a cascade's
chunks (its LM writes one codebook) are refined to whole frames first, as the refinement lanes do for the router
(vox_ensemble/refiner_lanes.py).
"""
from __future__ import annotations

from dataclasses import replace

import torch

from backend_python.engine.codec_runner import CodecRunner, StreamChunk, decode_windowed
from backend_python.engine.sequence import Chunk, Sequence
from backend_python.models.base import Codec


class InlineCodec:
    def __init__(self, codec: Codec | CodecRunner | None, refiner, device: torch.device) -> None:
        """`codec`: anything with `decode_windows` (None: chunks leave as codes); `refiner`: a cascade's
        (registry.load_refiner), or None."""
        self.codec = codec
        self.refiner = refiner
        self._device = device

    def decode(self, ready: list[tuple[Sequence, Chunk]]) -> list[tuple[Sequence, Chunk]]:
        """The chunks with their audio (float32, host): refined first where there is a refiner. Raises
        RuntimeError or ValueError from the codec or the refiner."""
        if self.refiner is not None:
            ready = self.refine(ready)
        audio = self._audio(ready)
        return [(seq, replace(chunk, audio=pcm.float().cpu())) for (seq, chunk), pcm in zip(ready, audio)]

    def refine(self, ready: list[tuple[Sequence, Chunk]]) -> list[tuple[Sequence, Chunk]]:
        """A cascade's chunks as whole frames, their other codebooks refined in one batch: each reads its stream's
        first codebook so far and continues the codes refined for its earlier frames."""
        asks = [(seq, ask) for seq, chunk in ready if (ask := self._ask(seq, chunk)) is not None]
        for (seq, _), codes in zip(asks, self.refiner.refine([ask for _, ask in asks]) if asks else []):
            seq.refined = torch.cat((seq.refined, torch.from_numpy(codes).long()))
        return [(seq, _whole(seq, chunk)) for seq, chunk in ready]

    def _ask(self, seq: Sequence, chunk: Chunk):
        """The refinement `chunk` needs (the refiner's request), or None when its frames are refined already."""
        end = chunk.start_frame - chunk.context_frames + chunk.tokens.shape[0]
        if seq.refined is None:
            seq.refined = torch.zeros(0, self.refiner.width, dtype=torch.long)
        if chunk.refine_context is None or end <= seq.refined.shape[0]:
            return None
        start = chunk.segment_start  # a segment is refined alone: its own text, its own codes
        semantic = torch.cat([f.reshape(-1)[:1] for f in seq.frames[start:end]]).cpu()
        return self.refiner.request(semantic.numpy(), seq.refined[start:].numpy(), chunk.refine_context.numpy())

    def _audio(self, ready: list[tuple[Sequence, Chunk]]) -> list[torch.Tensor]:
        """The chunks' new samples (and their overlap): through the runner's stream states where it keeps them,
        else windowed."""
        device = self._device
        chunks = [StreamChunk(seq.request_id, chunk.tokens.to(device), chunk.context_frames, chunk.start_frame,
                              chunk.is_last, chunk.lookahead_frames,
                              None if chunk.condition is None else chunk.condition.to(device))
                  for seq, chunk in ready]
        if isinstance(self.codec, CodecRunner):
            return self.codec.decode_chunks(chunks)
        return decode_windowed(self.codec, chunks)

    def release_stream(self, request_id: str) -> None:
        """A stream that ended early keeps no codec state (only a CodecRunner keeps any)."""
        if isinstance(self.codec, CodecRunner):
            self.codec.release_stream(request_id)


def _whole(seq: Sequence, chunk: Chunk) -> Chunk:
    """`chunk` with its frames' refined codebooks after its own first one ([T, 1 + width])."""
    if chunk.refine_context is None:
        return chunk
    start = chunk.start_frame - chunk.context_frames
    others = seq.refined[start:start + chunk.tokens.shape[0]]
    return replace(chunk, tokens=torch.cat((chunk.tokens, others.to(chunk.tokens.dtype)), 1))
