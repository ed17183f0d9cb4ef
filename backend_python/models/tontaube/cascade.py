"""TontaubeV1's cascade on one utterance: the semantic model writes codebook 0, each refiner its own codebook from
the rows below it, as the reference lays out each model's sequence:

    semantic:  [prompt cb0] [text window] PAD ([previous segment's codes] AUDIO_MARKER)? [forced codes] -> codes …
    refiner K: [prompt cb0] … [prompt cbK] [its segment's text] PAD [cb0 codes] END_OF_SPEECH
               (PAD [cbj codes]) for j = 1 … K-1   PAD [forced cbK codes] -> one cbK code per cb0 code

A refiner reads its segment's whole semantic row before writing (it is in its prefix), and writes greedily (the
reference's default), one code a step, exactly as many as the row has. Codes it was given (`forced`) are part of
its prefill: the reference streams a segment's first codes that way, refined early and kept when the segment is
refined whole; so refining a row in pieces, each piece forced with the codes before it, gives the codes of one
whole pass over the same row.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from .config import ACOUSTIC_CODES, NUM_CODEBOOKS, SEMANTIC_CODES, TokenIds
from .predictor import Predictor

END_OF_SPEECH_INDEX = SEMANTIC_CODES  # the semantic head's outputs after its codes
AUDIO_MARKER_INDEX = SEMANTIC_CODES + 1


@dataclass(frozen=True)
class VoicePrompt:
    """A voice's codes: one row per codebook, all of one length (up to 750 frames: 60 s)."""

    rows: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        if len(self.rows) != NUM_CODEBOOKS or len({len(r) for r in self.rows}) != 1:
            raise ValueError(f"a voice prompt is {NUM_CODEBOOKS} rows of one length")

    def front(self, ids: TokenIds, codebook: int, cap: int) -> list[int]:
        """The prompt rows a model for `codebook` reads (cb0 … cbK), each to its `cap` frames."""
        return [ids.code(k, c) for k in range(codebook + 1) for c in self.rows[k][:cap]]


def semantic_sequence(ids: TokenIds, prompt: VoicePrompt | None, cap: int, text: list[int],
                      previous: list[int] | None = None, forced: list[int] = ()) -> list[int]:
    """The semantic model's prefill for one segment (`text`: its window's ids)."""
    seq = (prompt.front(ids, 0, cap) if prompt else []) + list(text) + [ids.pad]
    if previous:
        seq += [ids.code(0, c) for c in previous] + [ids.audio_marker]
    return seq + [ids.code(0, c) for c in forced]


def refiner_sequence(ids: TokenIds, codebook: int, prompt: VoicePrompt | None, cap: int, text: list[int],
                     semantic: list[int], lower: list[list[int]], forced: list[int] = ()) -> list[int]:
    """Refiner `codebook`'s prefill for one segment: its semantic row, the rows below it, its forced codes."""
    if len(lower) != codebook - 1 or any(len(row) != len(semantic) for row in lower):
        raise ValueError(f"cb{codebook} reads {codebook - 1} lower rows as long as the semantic row")
    seq = (prompt.front(ids, codebook, cap) if prompt else []) + list(text)
    seq += [ids.pad] + [ids.code(0, c) for c in semantic] + [ids.eos]
    for k, row in enumerate(lower, start=1):
        seq += [ids.pad] + [ids.code(k, c) for c in row]
    return seq + [ids.pad] + [ids.code(codebook, c) for c in forced]


def greedy(logits: torch.Tensor) -> int:
    return int(torch.argmax(logits))


class Cascade:
    def __init__(self, predictors: list[Predictor], ids: TokenIds, prompt_caps: tuple[int, ...]) -> None:
        if [p.config.target_codebook for p in predictors] != list(range(NUM_CODEBOOKS)):
            raise ValueError("one predictor per codebook, in order")
        self.predictors, self.ids, self.caps = predictors, ids, prompt_caps

    def semantic(self, text: list[int], prompt: VoicePrompt | None = None, previous: list[int] | None = None,
                 forced: list[int] = (), max_codes: int = 400,
                 pick: Callable[[torch.Tensor], int] = greedy) -> tuple[list[int], int | None]:
        """A segment's semantic codes (the forced ones first) and how it ended: END_OF_SPEECH_INDEX,
        AUDIO_MARKER_INDEX, or None (it reached `max_codes`)."""
        seq = semantic_sequence(self.ids, prompt, self.caps[0], text, previous, forced)
        run = self.predictors[0].start(len(seq) + max_codes + 1)
        codes, logits = list(forced), run.prefill(seq, self.ids)
        while len(codes) < max_codes:
            index = pick(logits)
            if index >= SEMANTIC_CODES:
                return codes, index
            codes.append(index)
            logits = run.step(self.ids.code(0, index))
        return codes, None

    def refine(self, codebook: int, text: list[int], semantic: list[int], lower: list[list[int]],
               prompt: VoicePrompt | None = None, forced: list[int] = ()) -> list[int]:
        """Codebook `codebook`'s codes of a segment: the forced ones, then one greedy code per semantic code."""
        seq = refiner_sequence(self.ids, codebook, prompt, self.caps[codebook], text, semantic, lower, forced)
        codes = list(forced)
        if len(codes) >= len(semantic):
            return codes[:len(semantic)]
        run = self.predictors[codebook].start(len(seq) + len(semantic))
        logits = run.prefill(seq, self.ids)
        while True:
            code = greedy(logits[:ACOUSTIC_CODES])
            codes.append(code)
            if len(codes) == len(semantic):
                return codes
            logits = run.step(self.ids.code(codebook, code))

    def refine_all(self, text: list[int], semantic: list[int], prompt: VoicePrompt | None = None,
                   forced: list[list[int]] | None = None) -> list[list[int]]:
        """Codebooks 1 … 3 of a segment, in order (each reads the ones before it)."""
        rows: list[list[int]] = []
        for k in range(1, NUM_CODEBOOKS):
            rows.append(self.refine(k, text, semantic, rows, prompt, forced[k - 1] if forced else ()))
        return rows
