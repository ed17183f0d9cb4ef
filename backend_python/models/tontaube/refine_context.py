"""What a TontaubeV1 stream's refiners read besides its codes, as one INT32 vector the LM lane sends with each
chunk (`refine_context`) and the refinement lane reads: its segment's text ids, then the voice prompt's rows.

    [num_text, text ids …, num_frames, cb0 row …, cb1 row …, cb2 row …, cb3 row …]   (no voice: num_frames 0)

The rows are cut to the largest refiner cap (300 frames); each refiner cuts them to its own.
"""
from __future__ import annotations

import numpy as np

from .cascade import VoicePrompt
from .config import NUM_CODEBOOKS


def encode_refine_context(text: list[int], prompt: VoicePrompt | None, cap: int) -> np.ndarray:
    rows = [list(r[:cap]) for r in prompt.rows] if prompt is not None else [[] for _ in range(NUM_CODEBOOKS)]
    return np.array([len(text), *text, len(rows[0]), *[c for row in rows for c in row]], dtype=np.int32)


def decode_refine_context(context: np.ndarray) -> tuple[list[int], VoicePrompt | None]:
    """(text ids, voice prompt or None); ValueError naming what does not add up."""
    values = [int(v) for v in np.asarray(context).reshape(-1)]
    try:
        num_text = values[0]
        text, rest = values[1:1 + num_text], values[1 + num_text:]
        num_frames = rest[0]
    except IndexError:
        raise ValueError("refine_context is cut short") from None
    if num_text < 0 or num_frames < 0 or len(rest) != 1 + NUM_CODEBOOKS * num_frames:
        raise ValueError(f"refine_context holds {len(values)} values: not {num_text} text ids and "
                         f"{NUM_CODEBOOKS} rows of {num_frames} frames")
    rows = tuple(tuple(rest[1 + k * num_frames:1 + (k + 1) * num_frames]) for k in range(NUM_CODEBOOKS))
    return text, (VoicePrompt(rows) if num_frames else None)
