"""`TontaubeRefiner`: TontaubeV1's three refiners as the refinement lane runs them, on many streams' chunks at once.

A request is one stream's chunk: its segment's semantic codes so far, the acoustic codes already refined for
the first of them (kept: forced into the prefill, as the reference forces its early codes), and the stream's
`refine_context` (refine_context.py). The answer is codebooks 1..3 for the rest. For each codebook in turn, the
requests' sequences are prefilled in one call, each on its own row of one KV cache (right-padded to the longest),
then their greedy steps run together, one batch row per request still writing (each at its own positions), with
one host read of a step's codes; a request's codes are what `Cascade.refine` gives it alone
(tests/unit/test_tontaube_refiner.py). A step of N streams' chunks is one call of each refiner per token, whatever
N (tests/unit/test_step_batching.py).
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
        """Each sequence's next `wanted` codes, greedy: one prefill of every sequence that writes, then one step of
        all that still write; one host read of their codes a step."""
        c, ids = refiner.config, self.config.ids
        live = [row for row, w in enumerate(wanted) if w > 0]
        out: list[list[int]] = [[] for _ in sequences]
        if not live:
            return out
        weight = refiner.model.embed_tokens.weight
        cache = KVCache.allocate(c.num_hidden_layers, len(live), c.num_key_value_heads,
                                 max(len(sequences[row]) + wanted[row] for row in live), c.head_dim, weight.device,
                                 weight.dtype, is_varlen=False)
        schemes = {row: rope_positions(sequences[row], ids, c.target_codebook, c.max_position_embeddings)
                   for row in live}
        logits = self._prefill(refiner, cache, [sequences[row] for row in live], [schemes[row].prefill for row in live])
        cache_rows = {row: i for i, row in enumerate(live)}
        while True:
            codes = logits[:, :ACOUSTIC_CODES].argmax(dim=-1).tolist()  # [live] codes: the step's one host read
            for row, code in zip(live, codes):
                out[row].append(code)
            going = [i for i, row in enumerate(live) if len(out[row]) < wanted[row]]
            if not going:
                return out
            live, codes = [live[i] for i in going], [codes[i] for i in going]
            tokens = [[ids.code(c.target_codebook, code)] for code in codes]
            places = [[len(sequences[row]) + len(out[row]) - 1] for row in live]
            rope = [[schemes[row].decoded(len(out[row]) - 1, c.max_position_embeddings)] for row in live]
            logits = self._run(refiner, cache, [cache_rows[row] for row in live], tokens, places, rope)

    def _prefill(self, refiner: Predictor, cache: KVCache, sequences: list[list[int]],
                 rope: list[list[int]]) -> torch.Tensor:
        """Sequence i into cache row i, all in one call, right-padded to the longest (a padded token sits past its
        row's last, where no real query reads it and the row's next step overwrites it) -> [n, head] logits for
        the token after each sequence's last."""
        length = max(len(seq) for seq in sequences)
        pad = lambda row, value: row + [value] * (length - len(row))  # noqa: E731
        places = [list(range(length))] * len(sequences)
        ends = torch.tensor([len(seq) - 1 for seq in sequences], device=refiner.device)
        return self._run(refiner, cache, list(range(len(sequences))),
                         [pad(seq, self.config.ids.pad) for seq in sequences], places,
                         [pad(r, r[-1]) for r in rope], ends)

    @staticmethod
    def _run(refiner: Predictor, cache: KVCache, rows: list[int], ids: list[list[int]], places: list[list[int]],
             rope: list[list[int]], ends: torch.Tensor | None = None) -> torch.Tensor:
        """Tokens `ids` [n, T] at `places` [n, T] of cache `rows`, RoPE at `rope` [n, T] -> [n, head] float32 logits
        for the token after each row's token at `ends` [n] (None: its last)."""
        device = refiner.device
        hidden = refiner.model.run(refiner.model.embed_tokens(torch.tensor(ids, device=device)),
                                   torch.tensor(rows, device=device), torch.tensor(places, device=device),
                                   torch.tensor(rope, device=device), cache)
        last = hidden[:, -1] if ends is None else hidden[torch.arange(hidden.shape[0], device=device), ends]
        return refiner.audio_head(last).float()


def build_request(semantic, refined, context) -> RefineRequest:
    """From the lane's tensors: semantic [n], refined [m, 3], context [c] (any int arrays)."""
    if np.asarray(refined).size % (NUM_CODEBOOKS - 1):
        raise ValueError(f"refined codes must be frames of {NUM_CODEBOOKS - 1} codes")
    return RefineRequest([int(v) for v in np.asarray(semantic).reshape(-1)],
                         [[int(v) for v in frame] for frame in np.asarray(refined).reshape(-1, NUM_CODEBOOKS - 1)],
                         np.asarray(context).reshape(-1))
