"""The delay pattern on the models' floor: delaying frames into a model's rows, and assembling rows back into
complete frames with the end-of-codes countdown (models/delay_pattern.py)."""
from __future__ import annotations

import pytest
import torch

from backend_python.models.delay_pattern import DelayPattern, FrameAssembler

BOS, EOS = -1, -2


def frames_of(num_frames: int, num_codebooks: int) -> torch.Tensor:
    """[T, K]: frame k's codebook j is 100 * k + j, so a code names its frame and codebook."""
    return 100 * torch.arange(num_frames).unsqueeze(1) + torch.arange(num_codebooks)


@pytest.mark.parametrize("delays", [(), (1, 0, 2), (0, -1, 2)])
def test_a_pattern_starts_with_codebook_0_at_delay_0(delays):
    with pytest.raises(ValueError, match="delays"):
        DelayPattern(delays)


def test_delaying_puts_codebook_j_of_frame_k_at_step_k_plus_its_delay():
    rows = DelayPattern((0, 1, 2)).delay(frames_of(2, 3), BOS, EOS)
    assert rows.tolist() == [[0, BOS, BOS],
                             [100, 1, BOS],
                             [EOS, 101, 2],
                             [EOS, EOS, 102]]


def push_all(pattern: DelayPattern, rows: torch.Tensor, end_step: int) -> list[tuple[list, bool]]:
    """Each step's (frames released, is_closed), codebook 0 reporting its end from `end_step` on."""
    assembler = FrameAssembler(pattern)
    out = []
    for step, row in enumerate(rows):
        assembled = assembler.push(row, is_eos=step >= end_step)
        out.append(([f.tolist() for f in assembled.frames], assembled.is_closed))
    return out


@pytest.mark.parametrize("delays", [(0, 1, 2, 3), (0, 3, 1, 1), (0, 1, 1, 1), (0, 0, 0, 0)])
def test_assembled_frames_are_the_frames_delayed_each_max_delay_steps_later(delays):
    pattern, num_frames = DelayPattern(delays), 5
    frames = frames_of(num_frames, 4)
    rows = torch.cat((pattern.delay(frames, BOS, EOS), torch.full((1, 4), EOS)))  # the end step of an undelayed one
    out = push_all(pattern, rows, end_step=num_frames)
    max_delay = pattern.max_delay
    closing = num_frames - 1 + max_delay if max_delay else num_frames
    assert [step for step, (got, _) in enumerate(out) if got] == [k + max_delay for k in range(num_frames)]
    assert [frame for got, _ in out for frame in got] == frames.tolist()
    assert [closed for _, closed in out[:closing + 1]] == [False] * closing + [True]


def test_the_countdown_ends_at_the_step_the_last_codebook_of_the_last_frame_comes():
    # delays 0..3, frames 0..2: codebook 0 ends at step 3; frame 2's codebook 3 comes at step 5
    pattern = DelayPattern((0, 1, 2, 3))
    out = push_all(pattern, pattern.delay(frames_of(3, 4), BOS, EOS), end_step=3)
    assert [closed for _, closed in out] == [False, False, False, False, False, True]
    assert out[5][0] == [[200, 201, 202, 203]]


def test_one_step_of_delay_closes_on_the_end_step_itself():
    pattern = DelayPattern((0, 1))
    out = push_all(pattern, pattern.delay(frames_of(2, 2), BOS, EOS), end_step=2)
    assert out[2] == ([[100, 101]], True)


def test_an_end_at_the_first_step_closes_at_once_with_no_frame():
    assembled = FrameAssembler(DelayPattern((0, 1, 2))).push(torch.tensor([EOS, BOS, BOS]), is_eos=True)
    assert assembled.frames == [] and assembled.is_closed


def test_an_end_reported_once_counts_as_reported_on_every_later_step():
    pattern = DelayPattern((0, 1, 2))
    rows = pattern.delay(frames_of(2, 3), BOS, EOS)
    assembler = FrameAssembler(pattern)
    closed = [assembler.push(row, is_eos=step == 2).is_closed for step, row in enumerate(rows)]
    assert closed == [False, False, False, True]


def test_padding_never_reaches_a_frame():
    pattern = DelayPattern((0, 2, 1, 4))
    out = push_all(pattern, pattern.delay(frames_of(6, 4), BOS, EOS), end_step=6)
    assert all(code >= 0 for got, _ in out for frame in got for code in frame)
