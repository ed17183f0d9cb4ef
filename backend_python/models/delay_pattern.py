"""The delay pattern of a multi-codebook SpeechLM (MusicGen, Higgs Audio, Zonos): codebook j of frame k is
emitted at step k + d_j, so one step's row of K codes holds codebooks of K different frames.

A family declares its delays (`SpeechLM.codebook_delays`); the engine keeps one `FrameAssembler` per stream,
which takes each step's row and releases the frames that row completes, so everything after it (the chunk
cutter, the codec windows, `max_frames`) counts complete frames as for an undelayed family. Frame k is
complete at step k + D (D = the largest delay): a stream's first frame comes D steps later than its twin's.

The end of speech is a countdown: the model reports it on codebook 0 (delay 0) at step E, so frames 0..E-1
exist; the last of them is complete at step E - 1 + D, when its last codebook closes, and the stream ends
there with every frame delivered. Codes a row holds for a frame before 0 or at E or after are the family's
padding (begin / end of codes) and are never read.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DelayPattern:
    """Each codebook's delay in steps; codebook 0 leads (delay 0) because it carries the end of speech."""

    delays: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.delays or self.delays[0] != 0 or min(self.delays) < 0:
            raise ValueError(f"delays must start with 0 (codebook 0 leads) and be >= 0, got {self.delays}")

    @property
    def num_codebooks(self) -> int:
        return len(self.delays)

    @property
    def max_delay(self) -> int:
        """D: the steps a frame waits for its last codebook, and a stream's steps past its frames."""
        return max(self.delays)

    def delay(self, frames: torch.Tensor, bos: int, eos: int) -> torch.Tensor:
        """frames [T, K] -> the rows a delayed model emits for them, [T + D, K]: row s holds codebook j of frame
        s - d_j, `bos` where that frame is before 0 and `eos` where it is past the last (a prompt's reference
        codes are fed to such a model this way)."""
        num_frames = frames.shape[0]
        steps = torch.arange(num_frames + self.max_delay).unsqueeze(1)
        source = steps - torch.tensor(self.delays)  # [T + D, K]: the frame each code belongs to
        rows = frames[source.clamp(0, max(num_frames - 1, 0)), torch.arange(self.num_codebooks)]
        return rows.masked_fill(source < 0, bos).masked_fill(source >= num_frames, eos)


@dataclass(frozen=True)
class Assembled:
    """What one step's row gave: the frames it completed, and whether the stream's codes are over."""

    frames: list[torch.Tensor]  # each [K], in order
    is_closed: bool  # the end of speech: every frame before it is in `frames` of this or an earlier step


class FrameAssembler:
    """One stream's delayed rows in, its complete frames out: it keeps the last D + 1 rows and, once codebook 0
    has ended, counts down to the step that closes the last codebook."""

    def __init__(self, pattern: DelayPattern) -> None:
        self.pattern = pattern
        self._window: list[torch.Tensor] = []  # the rows of steps s - D .. s, each [K]
        self._num_steps = 0
        self._end_step: int | None = None  # E: the step codebook 0 ended at (frames 0..E-1 exist)
        num_codebooks = pattern.num_codebooks
        self._pick = (torch.tensor(pattern.delays), torch.arange(num_codebooks))  # codebook j from row d_j

    def push(self, row: torch.Tensor, is_eos: bool) -> Assembled:
        """row [K]: the codes of the next step; `is_eos`: codebook 0 ended at this step or before (repeats
        after the first are ignored)."""
        step, max_delay = self._num_steps, self.pattern.max_delay
        self._num_steps += 1
        if is_eos and self._end_step is None:
            self._end_step = step
        self._window = (self._window + [row])[-(max_delay + 1):]
        frame = step - max_delay  # the frame this row completes, if it is one
        is_frame = frame >= 0 and (self._end_step is None or frame < self._end_step)
        frames = [torch.stack(self._window)[self._pick]] if is_frame else []
        closing = self._closing_step()
        return Assembled(frames, closing is not None and step >= closing)

    def _closing_step(self) -> int | None:
        """The step the last frame's last codebook comes at (the end step itself where no frame exists), or
        None before codebook 0 ended."""
        end = self._end_step
        if end is None or end == 0:
            return end
        return max(end, end - 1 + self.pattern.max_delay)
