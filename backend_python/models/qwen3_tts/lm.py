"""`Qwen3TTSLM`: the Qwen3-TTS (12 Hz) talker + code predictor behind the `SpeechLM` interface.

One decode step per frame, batched over slots: sample codebook 0 from each slot's stored logits,
run the code predictor for codebooks 1..15, then one talker step on the sum of the 16 codebook
embeddings plus the slot's next trailing text embedding (tts_pad once the text is used up).
On CUDA the frame runs as two CUDA graphs per batch-size bucket (`graphs/frame.py` FrameGraphs), captured in
`allocate_slots`; on the CPU it runs eagerly on the unpadded batch. Both run `_predict` and `_talk`.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from protocol.quoting import quoted

from ..base import DecodeBatch, Prompt, PromptOptions, VoiceReference, to_device
from ..graphs.buffers import batch_buckets
from ..graphs.frame import FrameGraphs, FrameInputs, eager_frame
from ..layers.compile import compile_hot_path
from ..layers.decoder import KVCache
from ..layers.empty_weights import empty_weights
from ..layers.random_init import init_random_weights
from ..graphs.prefill import PREFILL_LENGTHS, PrefillGraphs, plan_groups
from ..kernels import fused_linear, short_attention
from ..kernels import sampler as fused_sampler
from ..kernels.sampler import noise_keys
from ..layers.sampling import TINY, apply_repetition_penalty, host_columns, sample
from ..prompt_cache import PrefixKey, PromptCache, speaker_digest
from ..slots import SlotLayout, SlotSpeechLM
from . import checkpoint
from .config import NUM_SPECIAL_CODEC_IDS, Qwen3TTSConfig
from .presets import build_tiny_tokenizer
from .prompt import (AUTO_LANGUAGE, NUM_REF_SUFFIX_TOKENS, NUM_ROLE_TOKENS, assistant_text, instruct_text,
                     make_prompt, make_reference_prompt, num_prefix_positions, pad_embedding, prefill_embeddings, prefix_key,
                     prompt_embeddings, reference_text, resolve_language, speaker_embedding, trailing_embeddings)
from .voice_encoder import REF_CODES, SPEAKER_EMBEDDING
from .talker import Talker
from .text_feed import Qwen3TextFeed

MIN_FRAMES_BEFORE_EOS = 2  # the reference generates with min_new_tokens=2


@dataclass
class SlotMemory:
    """Device tensors for all slots (row s = slot s) plus one scratch row, the last, that the
    padding rows of a CUDA-graph bucket read and write."""

    kv: KVCache  # talker: [layers, slots, kv_heads, max_seq_len, head_dim]
    predictor_kv: KVCache  # code predictor: [layers, slots, kv_heads, num_code_groups, head_dim]
    logits: torch.Tensor  # [slots, vocab] float32, next codebook-0 logits
    hidden: torch.Tensor  # [slots, hidden], last talker hidden state (input of the predictor)
    seen: torch.Tensor  # [slots, vocab] bool, codebook-0 tokens emitted so far (repetition penalty)
    suppressed: torch.Tensor  # [vocab] bool, special ids never sampled (all but EOS)
    pad_embed: torch.Tensor  # [hidden], tts_pad text embedding

    @property
    def scratch_row(self) -> int:
        return self.logits.shape[0] - 1


@dataclass
class PrefillPart:
    """What one prompt's prefill runs: its positions from `start`, after a cached prefix already in its row."""

    embeds: torch.Tensor  # [L - start, H], the positions to run
    start: int  # the first of them: the cached prefix's length, or 0
    trailing: torch.Tensor  # [num_text_tokens, H], as SlotState's
    missed: PrefixKey | None = None  # a prefix the cache lacked: kept once the whole prompt is prefilled
    num_prefix: int = 0  # its positions

    @property
    def num_positions(self) -> int:
        """The positions it runs (a hit's cached prefix not among them)."""
        return self.embeds.shape[0]


@dataclass
class SlotState:
    """Host-side bookkeeping of one live slot."""

    position: int  # next talker position to write
    num_frames: int  # frames emitted so far (= index into trailing)
    trailing: torch.Tensor  # [num_text_tokens, hidden], text embeddings still to add, one per frame
    feed: Qwen3TextFeed | None = None  # a streaming-text request's text until its tts_eos is in `trailing`


def spoken_languages(config) -> tuple[str, ...]:
    """The languages a request may name, as the reference has them: the config's but the dialects, which a
    dialect voice speaks under auto."""
    return tuple(name for name in config.talker.codec_language_id if "dialect" not in name)


class Qwen3TTSLM(SlotSpeechLM):
    """Parameters live under `talker.*` exactly as in the official checkpoint."""

    def __init__(self, config: Qwen3TTSConfig, tokenizer, language: str = AUTO_LANGUAGE) -> None:
        super().__init__()
        if language != AUTO_LANGUAGE and language not in config.talker.codec_language_id:
            raise ValueError(f"unknown language {language!r}; known: "
                             f"{[AUTO_LANGUAGE, *config.talker.codec_language_id]}")
        self.config = config
        self.tokenizer = tokenizer
        self.language = language
        self.talker = Talker(config.talker)
        self._sample = sample  # the compiled sampler once `_compile` ran
        self._prefill_graphs: PrefillGraphs | None = None  # CUDA: captured with the frame graphs
        # the KV of voice prompt prefixes, shared by the requests that start with them (models/prompt_cache.py);
        # None: every prefill runs its whole prompt. The LM lane sets it (LaneSettings.prompt_cache_mib)
        self.prompt_cache: PromptCache | None = None

    # ---- loading -------------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, path: str | Path, device: str | torch.device = "cpu",
                        dtype: torch.dtype = torch.float32, language: str = AUTO_LANGUAGE) -> "Qwen3TTSLM":
        """Load a checkpoint dir (config.json, model.safetensors[.index.json], tokenizer files)."""
        config, tokenizer = checkpoint.read_config(path), checkpoint.load_tokenizer(path)
        with empty_weights():
            lm = cls(config, tokenizer, language)
        lm.load_state_dict(checkpoint.read_talker_state_dict(path), strict=True, assign=True)
        return lm.to(device=device, dtype=dtype).eval()

    @classmethod
    def from_config(cls, config: Qwen3TTSConfig, device: str | torch.device = "cpu",
                    dtype: torch.dtype = torch.float32, seed: int = 0, tokenizer=None,
                    language: str = AUTO_LANGUAGE) -> "Qwen3TTSLM":
        """Random weights (built on `meta`, materialised on `device`); tokenizer defaults to the tiny BPE."""
        tokenizer = tokenizer if tokenizer is not None else build_tiny_tokenizer()
        with empty_weights():
            lm = cls(config, tokenizer, language).to(dtype=dtype)
        lm.to_empty(device=device)
        init_random_weights(lm, seed)
        return lm.eval()

    # ---- SpeechLM properties -------------------------------------------------------------------
    @property
    def num_codebooks(self) -> int:
        return self.config.talker.num_code_groups

    @property
    def frame_rate(self) -> float:
        return self.config.frame_rate

    @property
    def voices(self) -> tuple[str, ...]:
        """The preset voices; none for a Base model, whose voice comes from reference audio."""
        return () if self.config.is_base else tuple(self.config.talker.spk_id)

    @property
    def supports_reference(self) -> bool:
        return self.config.is_base

    @property
    def device(self) -> torch.device:
        return self.talker.codec_head.weight.device

    @property
    def languages(self) -> tuple[str, ...]:
        return spoken_languages(self.config)

    @property
    def supports_instructions(self) -> bool:
        """A CustomVoice model's instruct; the reference takes none for the 0.6B, nor for a Base model (so none
        for a cloned voice). Where False the LM lane refuses instructions (speechlm_lm/prompt_options.py): the prompt
        builders below take those that reach them as allowed."""
        return not self.config.is_base and self.config.tts_model_size != "0b6"

    supports_text_first = True
    takes_prompt_options = True
    caches_prompts = True  # the head of every prompt (prompt.py): a voice's instructions, role and codec tags

    # ---- phases --------------------------------------------------------------------------------
    def encode_prompt(self, text: str, voice: str | None, reference: VoiceReference | None = None,
                      options: PromptOptions = PromptOptions()) -> Prompt:
        """voice None -> the first voice of the config; language the request's, else the model's (`auto` by
        default). A Base model takes no voice but a reference: its transcript (`reference.text`) and
        "ref_codes" clone in context, its speaker embedding alone (x-vector mode) otherwise."""
        if self.config.is_base:
            return self._encode_cloned(text, voice, reference, options)
        self.check_no_reference(reference)
        voice = self._resolve_voice(voice)
        ids = self.tokenizer(assistant_text(text))["input_ids"]
        return make_prompt(self.config, list(ids), self.config.talker.spk_id[voice], self._language_id(options, voice),
                           self._instruct_ids(options), options.is_text_first)

    def _language_id(self, options: PromptOptions, voice: str | None) -> int:
        return resolve_language(self.config, options.language or self.language, voice)

    def _instruct_ids(self, options: PromptOptions) -> list[int]:
        if not options.instructions:
            return []
        return list(self.tokenizer(instruct_text(options.instructions))["input_ids"])

    def _encode_cloned(self, text: str, voice: str | None, reference: VoiceReference | None,
                       options: PromptOptions) -> Prompt:
        _check_clone(voice, reference)
        is_icl = REF_CODES in reference.tensors
        if is_icl and not (reference.text or "").strip():
            raise ValueError("in-context cloning needs the reference audio's transcript (or x-vector-only mode)")
        ids = list(self.tokenizer(assistant_text(text))["input_ids"])
        ref_ids = (list(self.tokenizer(reference_text(reference.text))["input_ids"])[NUM_ROLE_TOKENS:-NUM_REF_SUFFIX_TOKENS]
                   if is_icl else None)
        return make_reference_prompt(self.config, ids, self._language_id(options, None), reference, ref_ids,
                                     options.is_text_first)

    def codec_prefix(self, prompt: Prompt) -> torch.Tensor | None:
        """An in-context clone's reference codes [T, 16]: the reference decodes the answer after them."""
        return prompt.tensors.get(REF_CODES)

    supports_streaming_text = True  # prefill needs the first text token; the rest trail, one per frame

    def open_text(self, voice: str | None, reference: VoiceReference | None = None,
                  options: PromptOptions = PromptOptions()) -> Qwen3TextFeed:
        """A streaming-text request's text; a Base model clones from the reference's speaker embedding. Its
        prompt cannot be text-first (the text is not there yet)."""
        if options.is_text_first:
            raise ValueError("a text-first prompt needs the whole text: a streamed text cannot have one")
        if self.config.is_base:
            return self._open_cloned_text(voice, reference, options)
        self.check_no_reference(reference)
        voice = self._resolve_voice(voice)
        return Qwen3TextFeed(self.config, self.tokenizer, self.config.talker.spk_id[voice],
                             self._language_id(options, voice), instruct_ids=self._instruct_ids(options))

    def _open_cloned_text(self, voice: str | None, reference: VoiceReference | None,
                          options: PromptOptions) -> Qwen3TextFeed:
        """x-vector cloning only: in context, the reference's transcript and frames take the first positions of
        the text, so the prefill would wait for nearly the whole text."""
        if reference is not None and REF_CODES in reference.tensors:
            raise ValueError("a streamed text clones a voice from its speaker embedding alone: send the reference "
                             "with x_vector_only, or the whole text in one request for in-context cloning")
        _check_clone(voice, reference)
        return Qwen3TextFeed(self.config, self.tokenizer, self.config.talker.codec_pad_id,
                             self._language_id(options, None), speaker_embedding=speaker_embedding(self.config, reference))

    def is_waiting_for_text(self, slot: int) -> bool:
        state = self._states.get(slot)
        if state is None or state.feed is None or state.feed.is_closed:
            return False
        return state.num_frames >= state.feed.num_trailing

    def _fuse_projections(self) -> None:
        self.talker.fuse_projections()
        fused = self.use_fused_predictor and short_attention.is_available(self.device)
        self.talker.code_predictor.model.use_short_cache_attention(self.config.talker.num_code_groups if fused else 0)
        frame = self.runs_fused_frame()
        for stack in (self.talker.model, self.talker.code_predictor.model):
            stack.use_fused_kernels(frame)
            stack.use_fp8_weights(frame and self.use_fp8_weights)

    def runs_fused_frame(self) -> bool:
        """The frame's layers as fused matmuls and its sampling as one kernel per codebook with the noise drawn
        inside (`kernels/fused_linear.py`, `kernels/sampler.py`)."""
        return (self.use_fused_frame and fused_linear.is_available(self.device)
                and fused_sampler.is_available(self.device))

    def _compile(self) -> None:
        """Inductor fuses each decoder layer (talker and predictor) and the sampling chain for the decode
        frame; the frame graphs then capture the compiled kernels (compiling happens in their warm-up
        runs). Prefill keeps the plain layers, under its own graphs."""
        compile_hot_path((self.talker.model, self.talker.code_predictor.model))
        self.talker.code_predictor.sample = self._sample = torch.compile(sample, fullgraph=True)

    def _allocate_memory(self, layout: SlotLayout) -> SlotMemory:
        t, device, dtype = self.config.talker, self.device, self.talker.codec_head.weight.dtype
        suppressed = torch.zeros(t.vocab_size, dtype=torch.bool, device=device)
        suppressed[t.vocab_size - NUM_SPECIAL_CODEC_IDS:] = True
        suppressed[t.codec_eos_token_id] = False
        num_rows = layout.num_slots + 1
        return SlotMemory(
            kv=self.talker.allocate_cache(num_rows, layout.max_seq_len, device, dtype, layout.kv_positions),
            predictor_kv=self.talker.code_predictor.allocate_cache(layout.batch, device, dtype),
            logits=torch.zeros(num_rows, t.vocab_size, device=device),
            hidden=torch.zeros(num_rows, t.hidden_size, device=device, dtype=dtype),
            seen=torch.zeros(num_rows, t.vocab_size, device=device, dtype=torch.bool),
            suppressed=suppressed, pad_embed=pad_embedding(self.config, self.talker, device))

    def _build_graphs(self, layout: SlotLayout) -> FrameGraphs:
        t, mem = self.config.talker, self._require_memory()
        graphs = FrameGraphs(self._predict, self._talk, batch_buckets(self.graph_batch_sizes, layout.batch),
                             mem.scratch_row, self.noise_width, t.hidden_size, self.num_codebooks, self.device,
                             mem.hidden.dtype)
        graphs.uses_noise_keys = self.runs_fused_frame()
        self._prefill_graphs = (self._build_prefill_graphs(mem) if self.is_graphed and
                                mem.kv.max_seq_len >= PREFILL_LENGTHS[0] else None)
        return self._capture_graphs(graphs)

    def _build_prefill_graphs(self, mem: SlotMemory) -> PrefillGraphs:
        lengths = tuple(n for n in PREFILL_LENGTHS if n <= mem.kv.max_seq_len)  # a padded row fits its cache row
        graphs = PrefillGraphs(self._prefill_rows, mem.scratch_row, self.config.talker.hidden_size, self.device,
                               mem.hidden.dtype, lengths=lengths)
        with torch.no_grad():
            graphs.capture_all()
        return graphs

    @property
    def noise_width(self) -> int:
        """Exp(1) draws per sampled row and frame: codebook 0, then each predictor step."""
        t = self.config.talker
        return t.vocab_size + (t.num_code_groups - 1) * t.codebook_size

    @torch.no_grad()
    def prefill(self, slot: int, prompt: Prompt) -> int:
        part = self._prefill_part(slot, prompt)
        self._run_part(slot, part)
        self._finish_prefill(slot, part, prompt)
        return part.num_positions

    @torch.no_grad()
    def prefill_batch(self, slots: list[int], prompts: list[Prompt]) -> int:
        """Several prompts at once: on CUDA graphs grouped by length bucket (graphs/prefill.py), else one by one."""
        if self._prefill_graphs is None or not self.use_cuda_graphs:
            return super().prefill_batch(slots, prompts)
        parts = [self._prefill_part(slot, prompt) for slot, prompt in zip(slots, prompts)]
        graphs = self._prefill_graphs
        groups, eager = plan_groups([p.embeds.shape[0] for p in parts], graphs.batch_sizes, graphs.lengths,
                                    graphs.max_tokens, [p.start for p in parts], self._require_memory().kv.max_seq_len)
        for group in groups:
            graphs.run(group, [parts[i].embeds for i in group.indices], [slots[i] for i in group.indices],
                       [parts[i].start for i in group.indices])
        for i in eager:
            self._run_part(slots[i], parts[i])
        for slot, part, prompt in zip(slots, parts, prompts):
            self._finish_prefill(slot, part, prompt)
        return sum(part.num_positions for part in parts)

    def _prefill_part(self, slot: int, prompt: Prompt) -> PrefillPart:
        """The positions the prompt's prefill runs: all of them, or those after its cached prefix (whose KV this
        copies into the slot's row, and whose embeddings are not built)."""
        self._check_length(prompt)
        if self.prompt_cache is None:
            embeds, trailing = self._prompt_embeddings(prompt)
            return PrefillPart(embeds, 0, trailing)
        key = prefix_key(self.config, prompt)
        start = self.prompt_cache.restore(key, self._require_memory().kv, slot)
        embeds, trailing = self._prompt_embeddings(prompt, skip_head=start > 0)
        if start:
            return PrefillPart(embeds, start, trailing)
        return PrefillPart(embeds, 0, trailing, missed=key, num_prefix=num_prefix_positions(self.config, prompt))

    def _run_part(self, slot: int, part: PrefillPart) -> None:
        rows, last, starts = to_device([slot, part.embeds.shape[0] - 1, part.start], self.device)
        self._prefill_rows(part.embeds[None], rows[None], last[None], starts[None])

    def _finish_prefill(self, slot: int, part: PrefillPart, prompt: Prompt) -> None:
        """The slot's state; a missed prefix's KV, now in the slot's row, goes into the cache."""
        if part.missed is not None:
            self.prompt_cache.keep(part.missed, self._require_memory().kv, slot, part.num_prefix)
        self._states[slot] = SlotState(position=part.start + part.embeds.shape[0], num_frames=0,
                                       trailing=part.trailing, feed=_open_feed(prompt))

    def forget_voice(self, reference: VoiceReference) -> int:
        """Drop the cached prompt prefixes of a cloned voice (its speaker embedding's) -> how many went."""
        if self.prompt_cache is None or SPEAKER_EMBEDDING not in reference.tensors:
            return 0
        return self.prompt_cache.forget(speaker_digest(speaker_embedding(self.config, reference)))

    def _check_length(self, prompt: Prompt) -> None:
        max_seq_len = self._require_memory().kv.max_seq_len
        if prompt.num_tokens > max_seq_len:
            raise ValueError(f"prompt of {prompt.num_tokens} tokens exceeds max_seq_len {max_seq_len}")

    def _prompt_embeddings(self, prompt: Prompt, skip_head: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """-> (prefill embeddings [L, H], or [L - P, H] without the head (`skip_head`: it is cached), trailing text
        embeddings [N, H])."""
        if prompt.text is None:
            return prompt_embeddings(self.config, self.talker, prompt, self.device, skip_head)
        feed = prompt.text  # streaming text: the trailing tokens final so far, tts_eos once it is closed
        return (prefill_embeddings(self.config, self.talker, prompt, self.device, skip_head),
                trailing_embeddings(self.config, self.talker, feed.trailing_ids(0), feed.is_closed, self.device))

    def _prefill_rows(self, embeds: torch.Tensor, rows: torch.Tensor, last: torch.Tensor,
                      starts: torch.Tensor) -> None:
        """embeds [B, L, H] (row b's real tokens first, then padding), rows [B], last [B], starts [B]: row b's tokens
        at positions starts[b] .. (a cached prefix before them) -> the hidden state at its last real token, next
        logits and a fresh repetition record in slot memory."""
        mem = self._require_memory()
        positions = starts[:, None] + torch.arange(embeds.shape[1], device=embeds.device)  # [B, L]
        # the plain layers: prefill's (batch, length) shapes would each compile; its graphs remove the launches
        hidden = self.talker(embeds, rows, positions, mem.kv, last, compiled=False)  # [B, H]
        mem.hidden[rows], mem.logits[rows] = hidden, self.talker.logits(hidden)
        mem.seen.index_fill_(0, rows, False)  # a fill, not `seen[rows] = False`: no CPU scalar in a graph

    @torch.no_grad()
    def decode(self, batch: DecodeBatch) -> tuple[torch.Tensor, torch.Tensor]:
        mem, states = self._require_memory(), [self._live_state(slot) for slot in batch.slots]
        for state in states:
            if state.feed is not None:
                self._take_text(state)
        floats, ints = self._host_columns(batch, states)
        texts = self._trailing_text(mem, states)
        if self._graphs is not None:
            keys = noise_keys(batch.generators, [s.num_frames for s in states]) if self._graphs.uses_noise_keys else None
            codes = self._graphs.run(floats, ints, texts, batch.sampling, batch.generators, self.is_graphed, keys)
        else:
            codes = eager_frame(self._predict, self._talk, self.noise_width, batch, floats, ints, texts, self.device)
        for s in states:
            s.position += 1
            s.num_frames += 1
        return codes, codes[:, 0] == self.config.talker.codec_eos_token_id

    # ---- helpers -------------------------------------------------------------------------------
    def _resolve_voice(self, voice: str | None) -> str:
        if voice is None:
            return self.voices[0]
        if voice.lower() not in self.config.talker.spk_id:
            raise ValueError(f"unknown voice {quoted(voice)}; known voices: {list(self.voices)}")
        return voice.lower()

    def _take_text(self, state: SlotState) -> None:
        """Embed a streaming-text slot's trailing tokens that became final since, and tts_eos once closed."""
        feed, known = state.feed, state.trailing.shape[0]
        if feed.num_trailing > known or feed.is_closed:
            new = trailing_embeddings(self.config, self.talker, feed.trailing_ids(known), feed.is_closed, self.device)
            state.trailing = torch.cat((state.trailing, new))
        if feed.is_closed:
            state.feed = None

    def _host_columns(self, batch: DecodeBatch, states: list[SlotState]) -> tuple[torch.Tensor, torch.Tensor]:
        """-> floats [B, 3], ints [B, 5] on the CPU, the columns of `FrameInputs.from_columns`."""
        floats, sampling_ints = host_columns(batch.sampling)
        frame_ints = torch.tensor([[slot, s.position, int(ignore or s.num_frames < MIN_FRAMES_BEFORE_EOS)]
                                   for slot, s, ignore in zip(batch.slots, states, batch.ignore_eos)])
        return floats, torch.cat((frame_ints, sampling_ints), dim=1)

    def _trailing_text(self, mem: SlotMemory, states: list[SlotState]) -> list[torch.Tensor]:
        """The text embedding each row adds to its next input: B tensors [H]."""
        return [s.trailing[s.num_frames] if s.num_frames < s.trailing.shape[0] else mem.pad_embed for s in states]

    def _predict(self, inputs: FrameInputs) -> tuple[torch.Tensor, torch.Tensor]:
        """Codebook 0 from the stored logits, then codebooks 1..G-1 -> (codes [B, G] int64, frame_embed [B, H])."""
        mem, t = self._require_memory(), self.config.talker
        if inputs.noise_keys is not None:  # the fused frame: each sampler draws its own noise
            code0 = fused_sampler.fused_sample(
                mem.logits, inputs.sampling, noise_keys=inputs.noise_keys, rows=inputs.rows, seen=mem.seen,
                suppressed=mem.suppressed, eos_id=t.codec_eos_token_id, is_eos_blocked=inputs.is_eos_blocked)
            step_noise = fused_sampler.NoiseKeys(inputs.noise_keys, t.vocab_size)
        else:
            noise = inputs.noise.clamp_min(TINY)  # a zero draw would turn a zero-probability token into 0/0 = NaN
            code0 = self._sample_code0(mem, inputs, noise[:, :t.vocab_size])  # [B]
            step_noise = noise[:, t.vocab_size:].view(-1, t.num_code_groups - 1, t.codebook_size)
        code0_embed = self.talker.embed_codec(code0)  # [B, H]
        rest, rest_embeds = self.talker.code_predictor.generate(
            mem.hidden[inputs.rows], code0_embed, mem.predictor_kv, inputs.sampling, step_noise)
        frame_embed = torch.cat((code0_embed[:, None], rest_embeds), dim=1).sum(dim=1)  # [B, H]
        return torch.cat((code0[:, None], rest), dim=1), frame_embed

    def _sample_code0(self, mem: SlotMemory, inputs: FrameInputs, noise: torch.Tensor) -> torch.Tensor:
        rows, s = inputs.rows, inputs.sampling
        logits = apply_repetition_penalty(mem.logits[rows], mem.seen[rows], s.repetition_penalty)
        blocked = mem.suppressed.expand(rows.shape[0], -1).clone()  # [B, V]
        blocked[:, self.config.talker.codec_eos_token_id] = inputs.is_eos_blocked
        code0 = self._sample(logits.masked_fill(blocked, float("-inf")), s, noise)
        # a device value: `seen[rows, code0] = True` would copy a CPU scalar, which graph capture forbids
        mem.seen.index_put_((rows, code0), torch.ones_like(code0, dtype=torch.bool))
        return code0

    def _talk(self, inputs: FrameInputs, frame_embed: torch.Tensor) -> None:
        """One talker token per row (frame_embed + text_embed: [B, H]); stores the next logits and hidden state."""
        mem, rows = self._require_memory(), inputs.rows
        x = (frame_embed + inputs.text_embed)[:, None]  # [B, 1, H]
        hidden = self.talker(x, rows, inputs.positions[:, None], mem.kv)  # [B, H]
        mem.hidden[rows], mem.logits[rows] = hidden, self.talker.logits(hidden)


def _check_clone(voice: str | None, reference: VoiceReference | None) -> None:
    """A Base model takes no preset voice, and needs a reference."""
    if voice:
        raise ValueError(f"voice {quoted(voice)} given to a Base model: it has no preset voices, it clones "
                         f"the voice of reference audio")
    if reference is None:
        raise ValueError("a Base model needs reference audio to clone a voice (it has no preset voices)")


def _open_feed(prompt: Prompt) -> Qwen3TextFeed | None:
    """A prefilled prompt's text while more of it may come (a closed one's tts_eos is already in its trailing)."""
    return prompt.text if prompt.text is not None and not prompt.text.is_closed else None
