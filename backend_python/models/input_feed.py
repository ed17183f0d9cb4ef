"""`InputFeed`: a stream's input frames as they arrive, for a model that listens while it speaks (an interleaved
model: target-speaker extraction, voice conversion). Pieces of any size come in order; the model reads them in
its own fixed chunks, so how the client cut its audio never changes what the model sees. Only the engine's thread
touches it (pieces from other threads wait in the engine's queue first)."""
from __future__ import annotations

import torch


class InputFeed:
    def __init__(self, num_codebooks: int, codebook_size: int) -> None:
        self.num_codebooks, self.codebook_size = num_codebooks, codebook_size
        self._pieces: list[torch.Tensor] = []
        self._joined: torch.Tensor | None = None
        self._num_frames = 0
        self.is_closed = False

    @property
    def num_frames(self) -> int:
        return self._num_frames

    def append(self, frames: torch.Tensor) -> None:
        """frames [N, K] int64 codes (N may be 0); raises ValueError naming what is wrong, and keeps nothing."""
        if self.is_closed:
            raise ValueError("the input is closed: no frame may follow its last piece")
        if frames.dim() != 2 or frames.shape[1] != self.num_codebooks:
            raise ValueError(f"input frames must be [N, {self.num_codebooks}], got {list(frames.shape)}")
        if frames.numel() and (int(frames.min()) < 0 or int(frames.max()) >= self.codebook_size):
            raise ValueError(f"input codes must be in [0, {self.codebook_size}), got "
                             f"[{int(frames.min())}, {int(frames.max())}]")
        if frames.shape[0]:
            self._pieces.append(frames.to(torch.int64).cpu())
            self._num_frames += frames.shape[0]
            self._joined = None

    def close(self) -> None:
        self.is_closed = True

    def frames(self, start: int, end: int) -> torch.Tensor:
        """Frames start .. end - 1 ([end - start, K]); raises IndexError past what has come."""
        if not 0 <= start <= end <= self._num_frames:
            raise IndexError(f"frames {start}..{end} of an input of {self._num_frames}")
        if self._joined is None:
            self._joined = torch.cat(self._pieces) if self._pieces else torch.zeros(0, self.num_codebooks,
                                                                                     dtype=torch.int64)
            self._pieces = [self._joined]
        return self._joined[start:end]
