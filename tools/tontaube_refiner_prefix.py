"""Whether a TontaubeV1 refiner's KV cache could be kept per stream: how much of a chunk's refiner sequence
(cascade.refiner_sequence) is the previous chunk's, token for token and RoPE position for position.

    python3 -m tools.tontaube_refiner_prefix --chunk 8

Refiner K's sequence for a chunk of a segment with n semantic codes so far, m of them refined before it:

    [prompt cb0..cbK] [text] PAD [cb0 × n] EOS (PAD [cbj × n]) for j < K   PAD [cbK × m]  -> writes cbK × (n - m)

The next chunk's new semantic codes go in before EOS, so of the previous chunk's sequence only the head up to its
semantic codes stays a prefix; its EOS, lower rows and forced codes follow later codes and are other tokens' keys
now. The RoPE positions (positions.py) are shifted so that the written codes continue from the sequence's length:
the shift grows with n, so even the shared head sits at other positions. Chunks are cut as the family's plan cuts
them (models/tontaube/description.py); a voice prompt of `--voice-frames` and a text of `--text-chars` ids. For each
refiner: today's prefill, the shared head, the tokens a prefix cache would still prefill, the tokens the chunk
adds, and how far the shared head's positions moved. Then, on the tiny refiners (random weights, float32, CPU),
the largest difference between the shared head's last hidden state at the two chunks' positions. One JSON line.
"""
from __future__ import annotations

import argparse
import itertools
import json
import random

import torch

from backend_python.models.layers.random_init import init_random_weights
from backend_python.models.tontaube.cascade import refiner_sequence
from backend_python.models.tontaube.config import ACOUSTIC_CODES, NUM_CODEBOOKS, PROMPT_CAPS, SEMANTIC_CODES
from backend_python.models.tontaube.positions import rope_positions
from backend_python.models.tontaube.predictor import Predictor
from backend_python.models.tontaube.presets import tiny
from backend_python.models.tontaube.tiny import random_voice
from backend_python.models.tontaube.description import DESCRIPTION

MAX_POSITIONS = 40960  # the full refiners'


def chunk_ends(num_chunks: int) -> list[int]:
    """The semantic codes a segment has at the end of each of its first `num_chunks` chunks (the family's plan)."""
    plan = DESCRIPTION.chunk_plan
    return list(itertools.accumulate(plan.size(i) for i in range(num_chunks)))


def common_prefix(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def sequences(ids, k: int, voice, text: list[int], semantic: list[int], acoustic: list[list[int]],
              ends: list[int], chunk: int) -> tuple[list[int], list[int]]:
    """Refiner k's sequences for chunk `chunk` - 1 and chunk `chunk` (each: frames start..end, start forced)."""
    def at(c: int) -> list[int]:
        n, m = ends[c - 1], ends[c - 2] if c >= 2 else 0
        lower = [row[:n] for row in acoustic[:k - 1]]
        return refiner_sequence(ids, k, voice, PROMPT_CAPS[k], text, semantic[:n], lower, acoustic[k - 1][:m])
    return at(chunk - 1), at(chunk)


def layout(ids, voice, text, semantic, acoustic, ends, chunk: int) -> dict:
    rows = {}
    for k in range(1, NUM_CODEBOOKS):
        before, after = sequences(ids, k, voice, text, semantic, acoustic, ends, chunk)
        shared = common_prefix(before, after)
        moved = {b - a for a, b in zip(rope_positions(before, ids, k, MAX_POSITIONS).prefill[:shared],
                                        rope_positions(after, ids, k, MAX_POSITIONS).prefill[:shared])}
        rows[f"cb{k}"] = {"prefill_today": len(after), "shared_head": shared,
                          "first_differing": {"previous": _name(ids, before[shared]), "now": _name(ids, after[shared])},
                          "prefill_with_prefix_cache": len(after) - shared,
                          "tokens_the_chunk_adds": len(after) - len(before),
                          "shared_head_position_moves": sorted(moved)}
    return rows


def _name(ids, token: int) -> str:
    if token == ids.eos:
        return "EOS"
    if token == ids.pad:
        return "PAD"
    return f"cb{ids.codebook_of(token)} code" if token >= ids.dc_base else "text"


def hidden_difference(ids, voice, text, semantic, acoustic, ends, chunk: int) -> float:
    """The tiny cb1 refiner's last hidden state over the shared head, at the two chunks' positions."""
    config = tiny().predictors[1]
    model = Predictor(config).eval()
    init_random_weights(model, seed=12)
    before, after = sequences(ids, 1, voice, text, semantic, acoustic, ends, chunk)
    shared = common_prefix(before, after)
    states = []
    with torch.no_grad():
        for seq in (before, after):
            run = model.start(len(seq))
            run.positions = rope_positions(seq, ids, 1, config.max_position_embeddings)
            states.append(_last_hidden(model, seq[:shared], run.positions.prefill[:shared]))
    return (states[0] - states[1]).abs().max().item()


def _last_hidden(model: Predictor, seq: list[int], rope: list[int]) -> torch.Tensor:
    from backend_python.models.layers.decoder import KVCache
    c = model.config
    cache = KVCache.allocate(c.num_hidden_layers, 1, c.num_key_value_heads, len(seq), c.head_dim,
                             torch.device("cpu"), torch.float32, is_varlen=False)
    embeds = model.model.embed_tokens(torch.tensor([seq]))
    return model.model.run(embeds, torch.zeros(1, dtype=torch.long), torch.arange(len(seq))[None],
                           torch.tensor([rope]), cache)[0, -1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunk", type=int, default=8, help="the chunk to look at (1-based, >= 2)")
    parser.add_argument("--text-chars", type=int, default=200)
    parser.add_argument("--voice-frames", type=int, default=PROMPT_CAPS[0], help="0: no voice prompt")
    args = parser.parse_args()
    ids = tiny().ids
    ends = chunk_ends(args.chunk)
    rng = random.Random(0)
    voice = random_voice(args.voice_frames, seed=0) if args.voice_frames else None
    text = [rng.randrange(256) for _ in range(args.text_chars)]
    semantic = [rng.randrange(SEMANTIC_CODES) for _ in range(ends[-1])]
    acoustic = [[rng.randrange(ACOUSTIC_CODES) for _ in range(ends[-1])] for _ in range(NUM_CODEBOOKS - 1)]
    row = {"chunk": args.chunk, "frames": [ends[args.chunk - 2], ends[args.chunk - 1]],
           "refiners": layout(ids, voice, text, semantic, acoustic, ends, args.chunk),
           "tiny_cb1_shared_head_max_abs_difference": hidden_difference(ids, voice, text, semantic, acoustic,
                                                                       ends, args.chunk)}
    print(json.dumps(row))


if __name__ == "__main__":
    main()
