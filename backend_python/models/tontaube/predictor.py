"""One TontaubeV1 model: a Qwen3 decoder over the flat vocabulary (config.py) and its audio head, run at the RoPE
positions of the front-prompt scheme (positions.py), which are not the tokens' places in the sequence: the cache
and the causal mask follow the places, RoPE the positions.

`Predictor` is the weights (the official names: `model.embed_tokens`, `model.layers.*`, `model.norm`,
`audio_head.fc1`, `audio_head.fc2`); `PredictorRun` one sequence's KV cache on it, for a prefill then one token
at a time. Its logits are the head's, over the model's own codes (and for the semantic model end of speech, then
the audio marker): the reference fills the rest of the vocabulary with -1e9, which nothing can sample, so only
these are kept.
"""
from __future__ import annotations

import torch
from torch import nn

from ..layers.decoder import DecoderStack, KVCache, Step
from .config import PredictorConfig, TokenIds
from .positions import Positions, rope_positions


class AudioTokenHead(nn.Module):
    """fc1 (with bias) -> Mish -> fc2 (with bias)."""

    def __init__(self, hidden_size: int, inner: int, outputs: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(hidden_size, inner)
        self.fc2 = nn.Linear(inner, outputs)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.fc2(nn.functional.mish(self.fc1(hidden)))


class Backbone(DecoderStack):
    def __init__(self, c: PredictorConfig) -> None:
        super().__init__(c.num_hidden_layers, c.hidden_size, c.intermediate_size, c.num_attention_heads,
                         c.num_key_value_heads, c.head_dim, c.rms_norm_eps)
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.config = c

    def run(self, embeds: torch.Tensor, rows: torch.Tensor, places: torch.Tensor, rope: torch.Tensor,
            cache: KVCache) -> torch.Tensor:
        """embeds [B, T, H] written at `places` [B, T] of cache `rows` [B], RoPE at `rope` [B, T] (the scheme's
        positions, positions.py) -> the final-normed hidden states [B, T, H]."""
        c = self.config
        step = Step.build(rows, places, c.head_dim, c.rope_theta, cache, embeds.dtype, rope_positions=rope)
        return self(embeds, step, cache, compiled=False)


class Predictor(nn.Module):
    def __init__(self, config: PredictorConfig) -> None:
        super().__init__()
        self.config = config
        self.model = Backbone(config)
        self.audio_head = AudioTokenHead(config.hidden_size, config.audio_head_hidden, config.head_size)

    @property
    def device(self) -> torch.device:
        return self.model.embed_tokens.weight.device

    def start(self, max_len: int) -> "PredictorRun":
        return PredictorRun(self, max_len)


class PredictorRun:
    """One sequence on a predictor: `prefill(ids)` then `step(token)`, each giving the next token's logits."""

    def __init__(self, predictor: Predictor, max_len: int) -> None:
        c = predictor.config
        self.predictor, self.max_len = predictor, max_len
        weight = predictor.model.embed_tokens.weight
        self.cache = KVCache.allocate(c.num_hidden_layers, 1, c.num_key_value_heads, max_len, c.head_dim,
                                      weight.device, weight.dtype, is_varlen=False)
        self.length = 0
        self.positions: Positions | None = None
        self._rows = torch.zeros(1, dtype=torch.long, device=weight.device)

    @torch.no_grad()
    def prefill(self, ids: list[int], tokens: TokenIds) -> torch.Tensor:
        """The prefill's logits for the token after it: [head_size] float32."""
        c = self.predictor.config
        self.positions = rope_positions(ids, tokens, c.target_codebook, c.max_position_embeddings)
        return self._run(ids, self.positions.prefill)

    @torch.no_grad()
    def step(self, token: int) -> torch.Tensor:
        """Append one written token; the next one's logits."""
        t = self.length - len(self.positions.prefill)
        return self._run([token], [self.positions.decoded(t, self.predictor.config.max_position_embeddings)])

    def _run(self, ids: list[int], rope: list[int]) -> torch.Tensor:
        p = self.predictor
        if self.length + len(ids) > self.max_len:
            raise ValueError(f"the sequence outgrew its {self.max_len} positions")
        device = p.device
        places = torch.arange(self.length, self.length + len(ids), device=device)[None]
        embeds = p.model.embed_tokens(torch.tensor([ids], device=device))
        hidden = p.model.run(embeds, self._rows, places, torch.tensor([rope], device=device), self.cache)[:, -1]
        self.length += len(ids)
        return p.audio_head(hidden)[0].float()
