"""`TontaubeRefiner`: TontaubeV1's three refiners as the refinement lane runs them, on many streams' chunks at once.

A request is one stream's chunk: its segment's semantic codes so far, the acoustic codes already refined for
the first of them (kept: forced into the prefill, as the reference forces its early codes), and the stream's
`refine_context` (refine_context.py). The answer is codebooks 1..3 for the rest. For each codebook in turn, every
request's sequence is prefilled on its own row of one KV cache, then their greedy steps run together, one batch
row per request still writing (each at its own positions); a request's codes are what `Cascade.refine` gives it
alone (tests/unit/test_tontaube_refiner.py).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..layers.decoder import KVCache
from .cascade import refiner_sequence
from .config import ACOUSTIC_CODES, NUM_CODEBOOKS, SEMANTIC_CODES, TontaubeConfig
from .positions import rope_positions
from .predictor import Predictor
from .refine_context import decode_refine_context


@dataclass
class RefineRequest:
    semantic: list[int]  # the segment's semantic codes so far
    refined: list[list[int]]  # [frames, 3]: codebooks 1..3 of its first frames (forced)
    context: np.ndarray  # refine_context


class TontaubeRefiner:
    def __init__(self, config: TontaubeConfig, refiners: list[Predictor]) -> None:
        if [p.config.target_codebook for p in refiners] != list(range(1, NUM_CODEBOOKS)):
            raise ValueError("the refiners of codebooks 1..3, in order")
        self.config, self.refiners = config, refiners

    width = NUM_CODEBOOKS - 1  # the codebooks it writes per frame

    @property
    def device(self) -> torch.device:
        return self.refiners[0].device

    @staticmethod
    def request(semantic, refined, context) -> RefineRequest:
        """A request from the lane's tensors (build_request)."""
        return build_request(semantic, refined, context)

    def check(self, request: RefineRequest) -> None:
        """ValueError naming what is wrong with one request (the others in its batch go on)."""
        if not request.semantic or any(not 0 <= c < SEMANTIC_CODES for c in request.semantic):
            raise ValueError(f"semantic codes must be a non-empty row in [0, {SEMANTIC_CODES})")
        if len(request.refined) > len(request.semantic) or any(
                len(frame) != NUM_CODEBOOKS - 1 or not all(0 <= c < ACOUSTIC_CODES for c in frame)
                for frame in request.refined):
            raise ValueError(f"refined codes must be at most one frame of {NUM_CODEBOOKS - 1} codes in "
                             f"[0, {ACOUSTIC_CODES}) per semantic code")
        decode_refine_context(request.context)

    @torch.no_grad()
    def refine(self, requests: list[RefineRequest]) -> list[np.ndarray]:
        """Each request's codes for its frames past `refined`: [n - m, 3] int32."""
        prepared = [decode_refine_context(r.context) for r in requests]
        rows: list[list[list[int]]] = [[] for _ in requests]  # per request: codebook rows 1..k so far
        for k, refiner in enumerate(self.refiners, start=1):
            sequences = []
            for r, (text, voice), done in zip(requests, prepared, rows):
                forced = [frame[k - 1] for frame in r.refined]
                sequences.append(refiner_sequence(self.config.ids, k, voice, self.config.prompt_caps[k], text,
                                                  r.semantic, done, forced))
            wanted = [len(r.semantic) - len(r.refined) for r in requests]
            new = self._greedy(refiner, sequences, wanted)
            for r, done, codes in zip(requests, rows, new):
                done.append([frame[k - 1] for frame in r.refined] + codes)
        return [np.array(done, dtype=np.int32).T[len(r.refined):] for r, done in zip(requests, rows)]

    def _greedy(self, refiner: Predictor, sequences: list[list[int]], wanted: list[int]) -> list[list[int]]:
        """Each sequence's next `wanted` codes, greedy, the steps of all of them batched."""
        c, ids = refiner.config, self.config.ids
        max_len = max(len(s) + w for s, w in zip(sequences, wanted))
        weight = refiner.model.embed_tokens.weight
        cache = KVCache.allocate(c.num_hidden_layers, len(sequences), c.num_key_value_heads, max_len, c.head_dim,
                                 weight.device, weight.dtype, is_varlen=False)
        logits, schemes = [], []
        for row, seq in enumerate(sequences):
            schemes.append(rope_positions(seq, ids, c.target_codebook, c.max_position_embeddings))
            logits.append(self._run(refiner, cache, [row], [seq], [0], [schemes[-1].prefill])[0])
        out: list[list[int]] = [[] for _ in sequences]
        live = [row for row, w in enumerate(wanted) if w > 0]
        while live:
            codes = {row: int(torch.argmax(logits[row][:ACOUSTIC_CODES])) for row in live}
            for row in live:
                out[row].append(codes[row])
            live = [row for row in live if len(out[row]) < wanted[row]]
            if not live:
                break
            places = [len(sequences[row]) + len(out[row]) - 1 for row in live]
            rope = [[schemes[row].decoded(len(out[row]) - 1, c.max_position_embeddings)] for row in live]
            stepped = self._run(refiner, cache, live, [[ids.code(c.target_codebook, codes[row])] for row in live],
                                places, rope)
            for row, row_logits in zip(live, stepped):
                logits[row] = row_logits
        return out

    @staticmethod
    def _run(refiner: Predictor, cache: KVCache, rows: list[int], ids: list[list[int]], starts: list[int],
             rope: list[list[int]]) -> list[torch.Tensor]:
        """Tokens `ids` (one list per row, of one length) at places `starts`.. of their rows -> each row's logits
        for the token after its last."""
        device = refiner.device
        places = torch.tensor(starts, device=device)[:, None] + torch.arange(len(ids[0]), device=device)
        hidden = refiner.model.run(refiner.model.embed_tokens(torch.tensor(ids, device=device)),
                                   torch.tensor(rows, device=device), places, torch.tensor(rope, device=device),
                                   cache)[:, -1]
        return list(refiner.audio_head(hidden).float())


def build_request(semantic, refined, context) -> RefineRequest:
    """From the lane's tensors: semantic [n], refined [m, 3], context [c] (any int arrays)."""
    if np.asarray(refined).size % (NUM_CODEBOOKS - 1):
        raise ValueError(f"refined codes must be frames of {NUM_CODEBOOKS - 1} codes")
    return RefineRequest([int(v) for v in np.asarray(semantic).reshape(-1)],
                         [[int(v) for v in frame] for frame in np.asarray(refined).reshape(-1, NUM_CODEBOOKS - 1)],
                         np.asarray(context).reshape(-1))
