"""Streaming decode state of a causal codec, and the carry that threads it through one batched call.

A strictly causal decoder (left-padded convs, transposed convs trimmed on the right, a sliding-window
transformer) can decode a stream piece by piece: each stateful layer keeps the left tail of its input
(a conv's last `(kernel - 1) * dilation` samples, a transposed conv's last input frames whose kernel
still reaches the next output, the keys and values of the attention window), and decoding only new
frames with that tail in front equals decoding the whole utterance, up to float rounding.

Every tensor of a `CodecStreamState` has a fixed shape per codec, `[1, ...]`, whatever the stream's
position, so several requests' states stack into one batch (and the shapes of a call depend only on
its batch and frame counts, which CUDA graphs need). Rows of one batch may be at different positions
and bring different numbers of new frames: codes are right-padded, which is exact for the audio of
each row's real frames, and each layer cuts the new tail at the row's own end (a gather), so the
padding never enters a state.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

POSITION = "position"  # frames this state has consumed: [1] int64, the attention's validity and RoPE origin


@dataclass
class CodecStreamState:
    """One request's decoder state: layer name -> tail tensor [1, ...] (fixed shape), plus `position`."""

    tensors: dict[str, torch.Tensor]

    @property
    def num_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors.values())


@dataclass(frozen=True)
class StreamWindow:
    """A chunk as a codec whose state reads windows (`Codec.state_reads_windows`) decodes it: its new frames
    with the left context and lookahead its non-causal front stage needs."""

    codes: torch.Tensor  # [context_frames + num_new + lookahead_frames, K] int64: left context first
    context_frames: int
    lookahead_frames: int
    start_frame: int  # the stream's index of the first new frame
    is_last: bool  # the stream ends with this chunk: its state is not kept

    @property
    def num_new(self) -> int:
        return self.codes.shape[0] - self.context_frames - self.lookahead_frames


def stack_states(states: list[CodecStreamState]) -> dict[str, torch.Tensor]:
    """Row b of every batched tensor is `states[b]`'s."""
    return {key: torch.cat([s.tensors[key] for s in states]) for key in states[0].tensors}


def split_states(batched: dict[str, torch.Tensor], num_rows: int) -> list[CodecStreamState]:
    """The inverse of `stack_states` for the first `num_rows` rows. A row's tensors are views into one buffer of its
    own per dtype, filled by one copy (a `cat` of the row's slices): B rows cost B copies per dtype, where a clone
    per tensor cost B times the state's tensors (38 for the 12 Hz decoder: 1,216 copies at 32 rows, most of a
    background call's host time). A row pins only its own buffer, never the batch."""
    groups: dict[torch.dtype, list[str]] = {}
    for key, value in batched.items():
        groups.setdefault(value.dtype, []).append(key)
    states = []
    for row in range(num_rows):
        tensors: dict[str, torch.Tensor] = {}
        for keys in groups.values():
            parts = [batched[key][row] for key in keys]
            flat = torch.cat([part.reshape(-1) for part in parts])
            offset = 0
            for key, part in zip(keys, parts):
                tensors[key] = flat[offset: offset + part.numel()].view(1, *part.shape)
                offset += part.numel()
        states.append(CodecStreamState({key: tensors[key] for key in batched}))
    return states


class StreamCarry:
    """The state of one batched streaming call: each layer's tail in (`state`), its new tail out.

    `num_new[b]` is row b's number of real new frames; the batch is padded to `num_frames` frames.
    A layer whose input runs at `scale` samples per frame cuts row b's new tail so that it ends at
    sample `num_new[b] * scale`, its last real input.
    """

    def __init__(self, state: dict[str, torch.Tensor], num_new: torch.Tensor, num_frames: int,
                 is_ragged: bool = True) -> None:
        """num_new: [B] int64 on the state's device; `is_ragged` False promises every row has `num_frames`
        (the tails are then plain slices). A carry's whole work is device ops: it can run inside a CUDA graph."""
        self.state = state
        self.num_new = num_new
        self.num_frames = num_frames
        self.is_ragged = is_ragged
        self.position = state[POSITION]  # [B] int64: frames each row has consumed before this call
        self.new_state: dict[str, torch.Tensor] = {POSITION: self.position + num_new}

    @classmethod
    def for_rows(cls, state: dict[str, torch.Tensor], lengths: list[int]) -> StreamCarry:
        """A carry for rows of `lengths[b]` real new frames, padded to the longest."""
        if min(lengths) < 1:
            raise ValueError(f"every row needs at least one new frame, got {lengths}")
        num_new = torch.tensor(lengths, dtype=torch.long, device=state[POSITION].device)
        return cls(state, num_new, max(lengths), is_ragged=min(lengths) != max(lengths))

    def extend(self, key: str, x: torch.Tensor, dim: int = -1) -> torch.Tensor:
        """x with the layer's carried tail in front along `dim`; records the new tail (same width)."""
        full = torch.cat((self.state[key], x), dim=dim)
        self.keep_tail(key, x, dim)
        return full

    def keep_tail(self, key: str, x: torch.Tensor, dim: int = -1) -> None:
        """Record the layer's new tail from its carried tail and x (along `dim`), without building [tail, x]: row b's
        tail is the `width` samples before the end of its real input, reaching back into the carried tail where that
        input is shorter than `width`."""
        tail = self.state[key]
        width, length = tail.shape[dim], x.shape[dim]
        if not self.is_ragged and length >= width:  # no padding: the last `width` samples of x
            self.new_state[key] = x.narrow(dim, length - width, width).contiguous()
            return
        x, tail = x.movedim(dim, -1), tail.movedim(dim, -1)
        ends = self.num_new * (length // self.num_frames)  # [B]: where each row's real input ends in x
        index = ends[:, None] - width + torch.arange(width, device=x.device)[None, :]  # [B, width], x's coordinates
        index = index.view(index.shape[0], *([1] * (x.dim() - 2)), width).expand(*x.shape[:-1], width)
        from_x = x.gather(-1, index.clamp(min=0))
        from_tail = tail.gather(-1, (index + width).clamp(max=width - 1))
        self.new_state[key] = torch.where(index >= 0, from_x, from_tail).movedim(-1, dim).contiguous()
