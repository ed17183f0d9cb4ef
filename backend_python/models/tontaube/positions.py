"""Where each token of a TontaubeV1 sequence sits for RoPE: its "front prompt" position scheme.

A model's sequence is laid out in rows (config.py): the voice prompt's rows of codes first (one per codebook the
model reads), then the text (segments split by text markers), then `PAD` and the semantic row (the same segments'
codes split by audio markers, with end of speech once the utterance is whole), then for a refiner `PAD` and each
acoustic row in turn. Positions are not the token's index:

- each prompt row counts 1, 2, …, P on its own (P: the semantic prompt row's length); `PAD` sits at P;
- text and semantic codes share positions from P + 1: segment s of both starts at the same place, and its
  marker (text marker and audio marker alike) sits `max(text length + 25, audio length)` after that start, so the
  next segment starts at the same place in both rows; a segment whose audio is still to come counts 0 frames;
- end of speech sits one past the semantic row's last position; every acoustic row puts its r-th code where the
  semantic row's r-th code (not counting markers) sits.

Only differences of positions reach the attention, so the whole prefill is shifted so that the token the model
writes next continues linearly from it (decoding adds one per token), then offset by 25 and clamped to
[0, max_position_embeddings), as the reference model does: the clamp can change differences for a raw position
far below zero, and that is matched too. A refiner's next code may have to skip a marker's position (its rows
skip them): the shift leaves that `gap` before the first decoded position.
"""
from __future__ import annotations

from dataclasses import dataclass

from .config import CHUNK_REALIGN_OFFSET, TokenIds


@dataclass(frozen=True)
class Positions:
    prefill: list[int]  # the RoPE position of each prefill token
    first_decoded: int  # the RoPE position of the first token written after it; each later one adds 1

    def decoded(self, t: int, max_positions: int) -> int:
        """The position of the t-th token written after the prefill (t = 0 first)."""
        return min(max(self.first_decoded + t, 0), max_positions - 1)


def rope_positions(ids: list[int], tokens: TokenIds, target_codebook: int, max_positions: int) -> Positions:
    """The RoPE positions of a prefill `ids` for the model of `target_codebook`."""
    n = len(ids)
    raw, gap = _raw_positions(ids, tokens, target_codebook)
    shift = (n - 1 - gap) - raw[-1]
    top = max_positions - 1
    prefill = [min(max(p + shift + CHUNK_REALIGN_OFFSET, 0), top) for p in raw]
    return Positions(prefill, n + CHUNK_REALIGN_OFFSET)


def _split(items: list[int], marker: int) -> list[int]:
    """Lengths of the runs of `items` between `marker`s (a trailing empty run included)."""
    lengths = [0]
    for item in items:
        if item == marker:
            lengths.append(0)
        else:
            lengths[-1] += 1
    return lengths


def _raw_positions(ids: list[int], tokens: TokenIds, target_codebook: int) -> tuple[list[int], int]:
    n, positions = len(ids), [0] * len(ids)
    # the voice prompt's rows: a run of codes from the start, each codebook's row counting from 1
    i, row, count, prompt_len = 0, None, 0, 0
    while i < n and ids[i] >= tokens.dc_base:
        codebook = tokens.codebook_of(ids[i])
        count = count + 1 if codebook == row else 1
        row, positions[i] = codebook, count
        if codebook == 0:
            prompt_len = count
        i += 1
    pad_position = prompt_len
    text_start = i
    while i < n and ids[i] != tokens.pad:
        i += 1
    text_end = i  # the semantic row's PAD, or n
    audio_start = min(text_end + 1, n)
    audio_end = audio_start
    while audio_end < n and ids[audio_end] not in (tokens.pad, tokens.eos):
        audio_end += 1
    has_eos = audio_end < n and ids[audio_end] == tokens.eos

    text_lengths = _split(ids[text_start:text_end], tokens.text_marker)
    audio_lengths = _split(ids[audio_start:audio_end], tokens.audio_marker)
    num_markers = max(len(text_lengths), len(audio_lengths)) - 1
    starts, markers = [pad_position + 1], []
    for s in range(num_markers):
        text_len = text_lengths[s] if s < len(text_lengths) else 0
        audio_len = audio_lengths[s] if s < len(audio_lengths) else 0
        markers.append(starts[s] + max(text_len + CHUNK_REALIGN_OFFSET, audio_len))
        starts.append(markers[-1] + 1)

    def place(begin: int, end: int, marker: int) -> list[int]:
        """Positions of a text or semantic row's tokens; returns the non-marker ones."""
        segment, offset, plain = 0, 0, []
        for x in range(begin, end):
            if ids[x] == marker:
                positions[x], segment, offset = markers[segment], segment + 1, 0
            else:
                positions[x] = starts[segment] + offset
                plain.append(positions[x])
                offset += 1
        return plain

    place(text_start, text_end, tokens.text_marker)
    if text_end < n:
        positions[text_end] = pad_position
    semantic = place(audio_start, audio_end, tokens.audio_marker)
    if has_eos:
        positions[audio_end] = positions[audio_end - 1] + 1 if audio_end > audio_start else pad_position + 1

    # the acoustic rows: PAD at P, the r-th code where the semantic row's r-th code sits
    i = audio_end + 1 if has_eos else audio_end
    in_row = 0 if has_eos else len(semantic)
    while i < n:
        if ids[i] == tokens.pad:
            positions[i], in_row = pad_position, 0
        else:
            positions[i] = semantic[in_row] if in_row < len(semantic) else positions[i - 1] + 1
            in_row += 1
        i += 1
    gap = 0
    if target_codebook > 0 and semantic and in_row < len(semantic):
        gap = semantic[in_row] - positions[-1] - 1
    return positions, gap
