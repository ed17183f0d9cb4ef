"""`SpeechTokenLM`: a Qwen2 backbone that speaks one speech token per step (one codebook) from a speech-token
table and head of its own: the LM of CosyVoice 2 and 3, shared by the families built on it (a family may not
import another, so the common part lives here). Its mechanics (slots, sampling, graphs, the feedback of a step's
tokens) are `TokenStepLM`'s, which a family with another weight layout subclasses directly (TontaubeV1's semantic
model: models/tontaube/lm.py).

Parameter names are the reference's `llm.pt` names: the Qwen2 backbone under `llm.model.*` (the reference's
`Qwen2Encoder` holds transformers' `Qwen2ForCausalLM` as `model`: `llm.model.model.layers.N...`),
`speech_embedding.weight` (speech tokens in) and `llm_decoder.weight` (speech tokens out). A family adds
how its prompt is laid out (`prompt_embeddings`, e.g. CosyVoice 3's [sos, text, task_id]) and its frame limits.

A decode step samples the next token of every row from the head's speech codes [0, num_codes) plus the
end-of-speech column (`SpeechVocab`), then feeds the token back through the backbone; the last hidden state
it leaves is what the head reads next step. On CUDA the step is one CUDA graph per batch-size bucket
(`graphs/step.py`, the one-stage frame runner, a step's tokens as its codes), captured in `allocate_slots`; on the CPU it runs eagerly on the unpadded batch
over the used part of the cache. Both run `_step`.

Multi-token prediction (several frames per step, e.g. FlashTTS's heads on CosyVoice 2): a subclass sets
`frames_per_step` M > 1 and overrides `sample_frames`, which gets the step's last hidden state (the one the
head reads) and returns M tokens; the base class feeds all M back (`step_hidden`, M KV positions per step),
keeps the repetition-penalty bookkeeping and the noise blocks (one of `num_codes + 1` columns per frame),
and returns codes [B, M, 1] with is_eos [B, M].
"""
from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .base import DecodeBatch, Prompt, to_device
from .graphs.buffers import batch_buckets
from .layers.decoder import KVCache
from .layers.empty_weights import empty_weights
from .layers.qwen2 import Qwen2Backbone, Qwen2Config
from .layers.random_init import init_random_weights
from .layers.sampling import TINY, apply_repetition_penalty, draw_noise, host_columns, host_flags, sample
from .slots import SlotLayout, SlotSpeechLM, SlotState
from .graphs.step import FrameGraphs, FrameInputs

BIAS_STD = 0.1  # random biases (q/k/v, a biased head): non-zero, so tests see whether they are applied


@dataclass(frozen=True)
class SpeechVocab:
    """The speech side of the LM: codes [0, num_codes) are audio, `eos` ends the speech; the speech
    embedding table has `num_embeddings` rows and the head `num_head_rows` (both also hold special ids)."""

    num_codes: int
    eos: int
    num_embeddings: int
    num_head_rows: int
    head_bias: bool = False

    def __post_init__(self) -> None:
        if not self.num_codes <= self.eos < min(self.num_embeddings, self.num_head_rows):
            raise ValueError(f"eos must be a special id in both tables (>= num_codes): {self}")

    @property
    def num_columns(self) -> int:
        """Columns a frame samples from: the codes, then end of speech."""
        return self.num_codes + 1


@dataclass
class SlotMemory:
    """Device tensors for all slots (row s = slot s) plus one scratch row, the last, that the padding rows of
    a CUDA-graph bucket read and write."""

    kv: KVCache  # [layers, slots + 1, max_seq_len, kv_heads, head_dim]
    hidden: torch.Tensor  # [slots + 1, hidden], normed hidden state of the last token (the head reads it)
    seen: torch.Tensor  # [slots + 1, num_codes] bool, codes emitted so far (repetition penalty)

    @property
    def scratch_row(self) -> int:
        return self.hidden.shape[0] - 1


@dataclass
class TokenSlotState(SlotState):
    """A live slot: its next position, frames emitted, and where end of speech is allowed and forced."""

    num_frames: int = 0
    min_frames: int = 0  # end of speech is blocked before this many frames
    max_frames: int | None = None  # end of speech is forced at this frame (None: never)


class Qwen2Encoder(nn.Module):
    """`llm`: the reference's wrapper, holding the Qwen2 backbone as `model` (names `llm.model.model.*`)."""

    def __init__(self, cfg: Qwen2Config) -> None:
        super().__init__()
        self.model = Qwen2Backbone(cfg)


class TokenStepLM(SlotSpeechLM):
    """The mechanics of an LM that speaks one speech token per step (K = 1): slots, sampling, CUDA graphs, the
    feedback of a step's tokens. A layout supplies its weights through the hooks below (`SpeechTokenLM`:
    CosyVoice's Qwen2 layout; another family's own layout subclasses this directly)."""

    frames_per_step = 1
    vocab: SpeechVocab

    # ---- what a layout supplies ----------------------------------------------------------------
    @property
    @abstractmethod
    def hidden_size(self) -> int: ...

    @abstractmethod
    def embed_step_ids(self, ids: torch.Tensor) -> torch.Tensor:
        """Fed-back ids [B, M] (`step_ids`) -> their input embeddings [B, M, hidden]."""

    def step_ids(self, tokens: torch.Tensor) -> torch.Tensor:
        """A step's sampled columns [B, M] (num_codes = end of speech) -> the ids fed back."""
        return torch.where(tokens == self.vocab.num_codes, self.vocab.eos, tokens)

    @abstractmethod
    def head_logits(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """hidden [B, H] -> (the codes' logits [B, num_codes], end of speech's [B, 1]), float32."""

    @abstractmethod
    def allocate_kv(self, num_rows: int, layout: SlotLayout) -> KVCache: ...

    def prefill_hidden(self, prompt: Prompt, embeds: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor,
                       cache: KVCache) -> torch.Tensor:
        """The prefill's hidden states (a layout whose RoPE positions are not the tokens' places overrides it)."""
        return self.hidden_states(embeds, rows, positions, cache)


    # ---- SpeechLM properties -------------------------------------------------------------------
    @property
    def num_codebooks(self) -> int:
        return 1

    @property
    def positions_per_frame(self) -> int:
        """KV positions one decode step writes per slot: each of its frames is one token."""
        return self.frames_per_step

    @property
    def noise_width(self) -> int:
        """Exp(1) draws per sampled row and step: one block of codes + end of speech per frame."""
        return self.frames_per_step * self.vocab.num_columns

    # ---- what a family supplies ----------------------------------------------------------------
    @abstractmethod
    def prompt_embeddings(self, prompt: Prompt) -> torch.Tensor:
        """The prefill's input embeddings [L, hidden] on the model's device, in the model's dtype."""

    def frame_limits(self, prompt: Prompt) -> tuple[int, int | None]:
        """(min_frames, max_frames): end of speech is blocked before min_frames and forced at max_frames
        (None: never) for rows that do not ignore it. Default: neither."""
        return 0, None

    # ---- the hidden-state hook -----------------------------------------------------------------
    @abstractmethod
    def hidden_states(self, embeds: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor,
                      cache: KVCache) -> torch.Tensor:
        """embeds [B, T, hidden] at positions [B, T] of cache rows [B] -> every token's final-normed hidden
        state [B, T, hidden] (what the head, and a multi-token-prediction head, read). Writes the KV cache."""

    def step_hidden(self, tokens: torch.Tensor, inputs: FrameInputs, cache: KVCache) -> torch.Tensor:
        """Feed a step's sampled tokens [B, M] (column num_codes = end of speech) back at the rows' next M
        positions -> the last hidden state [B, hidden], which the head reads to sample the next step."""
        positions = inputs.positions[:, None] + torch.arange(tokens.shape[1], device=tokens.device)
        return self.hidden_states(self.embed_step_ids(self.step_ids(tokens)), inputs.rows, positions, cache)[:, -1]

    def speech_logits(self, hidden: torch.Tensor, inputs: FrameInputs) -> torch.Tensor:
        """hidden [B, H] -> [B, num_codes + 1] float32: the codes (repetition-penalised), then end of speech
        (-inf where blocked). Only these rows of the head are computed: other special ids are never sampled."""
        codes, end = self.head_logits(hidden)
        seen = self._require_memory().seen[inputs.rows]
        codes = apply_repetition_penalty(codes, seen, inputs.sampling.repetition_penalty)
        return torch.cat((codes, end.masked_fill(inputs.is_eos_blocked[:, None], float("-inf"))), dim=1)

    def sample_frames(self, hidden: torch.Tensor, inputs: FrameInputs, noise: torch.Tensor) -> torch.Tensor:
        """hidden [B, H] (the last hidden state), noise [B, noise_width] -> the step's tokens [B, frames_per_step]
        int64 in [0, num_codes] (num_codes = end of speech). A multi-token-prediction subclass overrides this."""
        return sample(self.speech_logits(hidden, inputs), inputs.sampling, noise)[:, None]

    # ---- phases --------------------------------------------------------------------------------
    def _allocate_memory(self, layout: SlotLayout) -> SlotMemory:
        rows = layout.num_slots + 1
        kv = self.allocate_kv(rows, layout)
        device, dtype = self.device, kv.k.dtype
        return SlotMemory(kv=kv, hidden=torch.zeros(rows, self.hidden_size, device=device, dtype=dtype),
                          seen=torch.zeros(rows, self.vocab.num_codes, device=device, dtype=torch.bool))

    def _build_graphs(self, layout: SlotLayout) -> FrameGraphs:
        mem = self._require_memory()
        buckets = batch_buckets(self.graph_batch_sizes, layout.batch)
        graphs = FrameGraphs(lambda inputs: self._step(inputs, mem.kv), buckets, mem.scratch_row, self.noise_width,
                             self.frames_per_step, self.device)
        return self._capture_graphs(graphs)

    @torch.no_grad()
    def prefill(self, slot: int, prompt: Prompt) -> None:
        mem = self._require_memory()
        if prompt.num_tokens > mem.kv.max_seq_len:
            raise ValueError(f"prompt of {prompt.num_tokens} tokens exceeds the cache's {mem.kv.max_seq_len}")
        embeds = self.prompt_embeddings(prompt)[None]  # [1, L, H]
        length = embeds.shape[1]
        rows, positions = to_device([slot], self.device), torch.arange(length, device=self.device)[None]
        mem.hidden[slot] = self.prefill_hidden(prompt, embeds, rows, positions, mem.kv.upto(length))[0, -1]
        mem.seen[slot].fill_(False)  # a fill: an item assignment would wait for the step in flight
        min_frames, max_frames = self.frame_limits(prompt)
        self._states[slot] = TokenSlotState(position=length, min_frames=min_frames, max_frames=max_frames)

    @torch.no_grad()
    def decode(self, batch: DecodeBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """codes [B, 1] with is_eos [B]; with frames_per_step M > 1, codes [B, M, 1] with is_eos [B, M]."""
        states = [self._live_state(slot) for slot in batch.slots]
        floats, ints = self._host_columns(batch, states)
        if self._graphs is not None:
            tokens = self._graphs.run(floats, ints, batch.sampling, batch.generators, self.use_cuda_graphs)
        else:
            tokens = self._decode_eager(batch, floats, ints, max(s.position for s in states) + self.frames_per_step)
        is_eos, forced = tokens == self.vocab.num_codes, self._forced_eos(batch, states)
        if forced.any():  # a CPU tensor: no device sync
            is_eos = is_eos | forced.to(tokens.device)
        for s in states:
            s.position += self.frames_per_step
            s.num_frames += self.frames_per_step
        codes = tokens.clamp(max=self.vocab.num_codes - 1)  # an end-of-speech frame's code is meaningless
        if self.frames_per_step == 1:
            return codes, is_eos[:, 0]
        return codes[..., None], is_eos

    # ---- helpers -------------------------------------------------------------------------------
    def _host_columns(self, batch: DecodeBatch, states: list[TokenSlotState]) -> tuple[torch.Tensor, torch.Tensor]:
        """-> floats [B, 3], ints [B, 5] on the CPU, the columns of `FrameInputs.from_columns`."""
        floats, sampling_ints = host_columns(batch.sampling)
        step_ints = torch.tensor([[slot, s.position, int(ignore or s.num_frames < s.min_frames)]
                                  for slot, s, ignore in zip(batch.slots, states, batch.ignore_eos)])
        return floats, torch.cat((step_ints, sampling_ints), dim=1)

    def _forced_eos(self, batch: DecodeBatch, states: list[TokenSlotState]) -> torch.Tensor:
        """[B, M] bool on the CPU: frames at or past a row's max_frames end it (rows that ignore EOS never)."""
        return torch.tensor([[not ignore and s.max_frames is not None and s.num_frames + j >= s.max_frames
                              for j in range(self.frames_per_step)]
                             for s, ignore in zip(states, batch.ignore_eos)], dtype=torch.bool)

    def _decode_eager(self, batch: DecodeBatch, floats: torch.Tensor, ints: torch.Tensor,
                      num_positions: int) -> torch.Tensor:
        """The unpadded, ungraphed step (CPU): skips the sampling work no row needs."""
        noise = torch.ones(floats.shape[0], self.noise_width, device=self.device)
        draw_noise(noise, batch.sampling, batch.generators)
        inputs = FrameInputs.from_columns(floats.to(self.device, non_blocking=True),
                                         ints.to(self.device, non_blocking=True), noise, **host_flags(batch.sampling))
        return self._step(inputs, self._require_memory().kv.upto(num_positions))

    def _step(self, inputs: FrameInputs, cache: KVCache) -> torch.Tensor:
        """Sample the step's tokens from the rows' last hidden states, then feed them back -> tokens
        [B, frames_per_step] int64 (num_codes = end of speech). No host sync."""
        mem, rows = self._require_memory(), inputs.rows
        noise = inputs.noise.clamp_min(TINY)  # a zero draw would give 0/0
        tokens = self.sample_frames(mem.hidden[rows], inputs, noise)
        # a device value: `seen[rows, i] = True` would copy a CPU scalar, which graph capture forbids
        seen_index = tokens.clamp(max=self.vocab.num_codes - 1)  # end-of-speech rows end anyway
        mem.seen.index_put_((rows[:, None].expand_as(tokens), seen_index), torch.ones_like(tokens, dtype=torch.bool))
        mem.hidden[rows] = self.step_hidden(tokens, inputs, cache)
        return tokens


class SpeechTokenLM(TokenStepLM):
    """A Qwen2 backbone with `speech_embedding` and `llm_decoder`, one speech token per frame (K = 1)."""

    def __init__(self, backbone: Qwen2Config, vocab: SpeechVocab, tokenizer) -> None:
        super().__init__()
        self.vocab = vocab
        self.tokenizer = tokenizer
        self.llm = Qwen2Encoder(backbone)
        self.speech_embedding = nn.Embedding(vocab.num_embeddings, backbone.hidden_size)
        self.llm_decoder = nn.Linear(backbone.hidden_size, vocab.num_head_rows, bias=vocab.head_bias)

    @property
    def backbone(self) -> Qwen2Backbone:
        return self.llm.model

    # ---- building a family's LM: `cls(config, tokenizer, voices)`, `config` with `frame_rate` and `voices` ----
    @classmethod
    def build_loaded(cls, config, tokenizer, voices: dict, state_dict: dict, device, dtype: torch.dtype):
        """A family's LM with the checkpoint's weights (built on `meta`, strict on every key)."""
        with empty_weights():
            lm = cls(config, tokenizer, voices)
        lm.load_state_dict(state_dict, strict=True, assign=True)
        return lm.to(device=device, dtype=dtype).eval()

    @classmethod
    def build_random(cls, config, tokenizer, voices: dict, device, dtype: torch.dtype, seed: int):
        """A family's LM with deterministic random weights (built on `meta`, materialised on `device`)."""
        with empty_weights():
            lm = cls(config, tokenizer, voices).to(dtype=dtype)
        lm.to_empty(device=device)
        lm.init_weights(seed)
        return lm.eval()

    @property
    def frame_rate(self) -> float:
        return self.config.frame_rate

    @property
    def voices(self) -> tuple[str, ...]:
        return self.config.voices

    def init_weights(self, seed: int) -> None:
        """Deterministic random weights (`layers.random_init`), with non-zero biases."""
        init_random_weights(self, seed)
        generator = torch.Generator(device=self.device).manual_seed(seed + 1)
        with torch.no_grad():
            for module in self.modules():
                if isinstance(module, nn.Linear) and module.bias is not None:
                    module.bias.normal_(0.0, BIAS_STD, generator=generator)

    @property
    def hidden_size(self) -> int:
        return self.backbone.cfg.hidden_size

    @property
    def device(self) -> torch.device:
        return self.speech_embedding.weight.device

    def embed_step_ids(self, ids: torch.Tensor) -> torch.Tensor:
        return self.speech_embedding(ids)

    def head_logits(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Only the codes' rows and end of speech's of the head: other special ids are never sampled."""
        weight, bias, vocab = self.llm_decoder.weight, self.llm_decoder.bias, self.vocab
        codes = F.linear(hidden, weight[:vocab.num_codes], None if bias is None else bias[:vocab.num_codes]).float()
        eos = slice(vocab.eos, vocab.eos + 1)
        return codes, F.linear(hidden, weight[eos], None if bias is None else bias[eos]).float()

    def allocate_kv(self, num_rows: int, layout: SlotLayout) -> KVCache:
        return self.backbone.allocate_cache(num_rows, layout.max_seq_len, self.device,
                                            self.speech_embedding.weight.dtype, layout.kv_positions)

    def hidden_states(self, embeds: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor,
                      cache: KVCache) -> torch.Tensor:
        """embeds [B, T, hidden] at positions [B, T] of cache rows [B] -> every token's final-normed hidden
        state [B, T, hidden] (what the head, and a multi-token-prediction head, read). Writes the KV cache."""
        return self.backbone(embeds, rows, positions, cache)

    def _fuse_projections(self) -> None:
        self.backbone.fuse_projections()
