"""`HiggsV3LM`: Higgs Audio v3 behind the `SpeechLM` interface, one delayed row of 8 codebooks per step.

A step samples every codebook at once from the fused audio head's logits (`audio_decoder_proj.audio_lm_head`,
K × 1026 logits), then runs one backbone token on the sum of the row's codebook embeddings
(`audio_codebook_embeddings`, codebook j's ids shifted by j × 1026), as the reference's
`_sample_audio_tokens` and `_embed_audio_ids` do. The delay pattern is the reference's (`use_delay_pattern`):
at step s codebook j holds frame s - j, the begin-of-stream id (1024) before frame 0; once codebook 0 has
sampled the end-of-stream id (1025) at step E, every codebook is end-of-stream after frame E (the
reference's `num_remaining_delays` countdown), and the engine closes the stream at step E - 1 + 7, when
frame E - 1's last codebook comes (models/delay_pattern.py): one step before the reference, whose last step
samples only a code of frame E, which it drops.

Unlike the reference: the end is read off codebook 0 only (codebooks 1..7 sample end-of-stream only after
it; the reference also honours one that does first); a live codebook never samples begin-of-stream (the reference
clips it to 1023 afterwards); `ignore_eos` rows never sample the end; sampling is the engine's
(temperature, top-k, top-p per row, no repetition penalty), not the reference's repetition-aware sampling.
On CUDA the step runs as two CUDA graphs per batch bucket (`graphs/frame.py` FrameGraphs: `_predict`, `_talk`).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ..base import DecodeBatch, Prompt, VoiceReference, to_device
from ..graphs.frame import FrameGraphs, FrameInputs, TwoStageFrameLM
from ..layers.decoder import DecoderStack, KVCache, Step
from ..layers.empty_weights import empty_weights
from ..layers.random_init import init_random_weights
from ..layers.sampling import TINY, sample
from ..slots import SlotLayout, SlotSpeechLM, SlotState
from ..text_segments import SegmentContext
from . import checkpoint
from .config import HiggsV3Config
from .presets import build_tiny_tokenizer, random_voice_codes
from .prompt import AUDIO, PromptFormat, reference_of, resolve_voice

NOT_ENDED = 2 ** 40  # a slot's end step before codebook 0 has ended
MAX_CONTEXT_S = 20.0  # a longer segment is not given to the next one as context (it would crowd the KV cache)


@dataclass
class SlotMemory:
    """Device tensors for all slots (row s = slot s) plus one scratch row, the last, for padding rows."""

    kv: KVCache  # [layers, slots, max_seq_len, kv_heads, head_dim] (or a pool)
    logits: torch.Tensor  # [slots, K, V] float32, the next step's audio logits
    steps: torch.Tensor  # [slots] int64, audio steps emitted (the next step's index)
    end_steps: torch.Tensor  # [slots] int64, the step codebook 0 ended at, or NOT_ENDED
    delays: torch.Tensor  # [K] int64
    no_text: torch.Tensor  # [hidden] zeros: nothing is added to a step's input (FrameInputs.text_embed)

    @property
    def scratch_row(self) -> int:
        return self.logits.shape[0] - 1


class Backbone(DecoderStack):
    """The Qwen3 stack (`embed_tokens`, `layers`, `norm` in the checkpoint; `model.*` here)."""

    def __init__(self, config: HiggsV3Config) -> None:
        b = config.backbone
        super().__init__(b.num_hidden_layers, b.hidden_size, b.intermediate_size, b.num_attention_heads,
                         b.num_key_value_heads, b.head_dim, b.rms_norm_eps)
        self.embed_tokens = nn.Embedding(b.vocab_size, b.hidden_size)
        self.backbone = b

    def run(self, embeds: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """embeds [B, T, H], rows [B], positions [B, T] -> the last hidden state [B, H] (normed)."""
        step = Step.build(rows, positions, self.backbone.head_dim, self.backbone.rope_theta, cache, embeds.dtype)
        return self(embeds, step, cache, compiled=False)[:, -1]


class AudioHead(nn.Module):
    """`audio_decoder_proj`: only its audio head (the text head is not loaded)."""

    def __init__(self, config: HiggsV3Config) -> None:
        super().__init__()
        self.audio_lm_head = nn.Linear(config.backbone.hidden_size,
                                       config.audio_num_codebooks * config.audio_vocab_size, bias=False)


class HiggsV3LM(TwoStageFrameLM, SlotSpeechLM):
    """Parameters carry the official `HiggsAudioModel` names (the backbone's under `model.`, checkpoint.py)."""

    def __init__(self, config: HiggsV3Config, tokenizer, voice_codes: dict[str, torch.Tensor]) -> None:
        super().__init__()
        self.config, self.tokenizer = config, tokenizer
        self.codebook_delays = config.codebook_delays
        self.model = Backbone(config)
        self.audio_codebook_embeddings = nn.Embedding(config.audio_num_codebooks * config.audio_vocab_size,
                                                      config.backbone.hidden_size)
        self.audio_decoder_proj = AudioHead(config)
        self.voice_codes = voice_codes  # preset voice -> its reference codes [T, K]
        self.format = PromptFormat(tokenizer, config.audio_out_bos_token, config.audio_eos_token, self.delay_pattern,
                                   config.audio_codebook_size, config.audio_stream_bos_id, config.audio_stream_eos_id)

    # ---- loading -------------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, path: str | Path, device: str | torch.device = "cpu",
                        dtype: torch.dtype = torch.float32) -> "HiggsV3LM":
        config, tokenizer = checkpoint.read_config(path), checkpoint.load_tokenizer(path)
        with empty_weights():
            lm = cls(config, tokenizer, checkpoint.read_voices(path))
        lm.load_state_dict(checkpoint.read_lm_state_dict(path), strict=True, assign=True)
        return lm.to(device=device, dtype=dtype).eval()

    @classmethod
    def from_config(cls, config: HiggsV3Config, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
                    seed: int = 0, tokenizer=None) -> "HiggsV3LM":
        """Random weights (built on `meta`, materialised on `device`), random preset voices; tokenizer defaults
        to the tiny BPE."""
        tokenizer = tokenizer if tokenizer is not None else build_tiny_tokenizer()
        with empty_weights():
            lm = cls(config, tokenizer, {}).to(dtype=dtype)
        lm.to_empty(device=device)
        init_random_weights(lm, seed)
        with torch.no_grad():  # a row's K embeddings sum to unit scale, as a text token's: the text is heard
            lm.audio_codebook_embeddings.weight.mul_(config.audio_num_codebooks ** -0.5)
        lm.voice_codes = random_voice_codes(config, seed)
        return lm.eval()

    # ---- SpeechLM properties -------------------------------------------------------------------
    @property
    def num_codebooks(self) -> int:
        return self.config.audio_num_codebooks

    @property
    def frame_rate(self) -> float:
        return self.config.frame_rate

    @property
    def voices(self) -> tuple[str, ...]:
        return tuple(self.config.voices)

    @property
    def device(self) -> torch.device:
        return self.audio_codebook_embeddings.weight.device

    supports_reference = True
    languages = ("english",)  # it takes no language setting

    def encode_prompt(self, text: str, voice: str | None, reference: VoiceReference | None = None) -> Prompt:
        """voice None and no reference: no voice prompt (the model picks one, as the reference's smart voice);
        a preset voice or a reference clones in context (prompt.py)."""
        return self.format.build(text, self._voice_turns(voice, reference))

    def encode_segment(self, text: str, voice: str | None, context: SegmentContext | None,
                       reference: VoiceReference | None = None) -> Prompt:
        """A segment of a streamed or long text, after the segment spoken before as an earlier turn (its text and
        frames), as the reference's long-form generation keeps its last chunks; a context longer than
        MAX_CONTEXT_S is left out. The cloned voice comes first in every segment."""
        turns = self._voice_turns(voice, reference)
        if context is not None and 0 < context.frames.shape[0] <= MAX_CONTEXT_S * self.frame_rate:
            turns.append((context.text, context.frames))
        return self.format.build(text, turns)

    def _voice_turns(self, voice: str | None, reference: VoiceReference | None) -> list[tuple[str, torch.Tensor]]:
        """The voice to clone as a spoken turn: the reference's, a preset voice's, or none."""
        voice, c = resolve_voice(self.voice_codes, voice), self.config
        if reference is not None:
            return [reference_of(reference, c.audio_num_codebooks, c.audio_codebook_size)]
        return [(c.voices[voice], self.voice_codes[voice])] if voice is not None else []

    # ---- memory and graphs ---------------------------------------------------------------------
    def _fuse_projections(self) -> None:
        self.model.fuse_projections()

    def _allocate_memory(self, layout: SlotLayout) -> SlotMemory:
        c, b, device = self.config, self.config.backbone, self.device
        num_rows = layout.num_slots + 1
        kv = KVCache.allocate(b.num_hidden_layers, num_rows, b.num_key_value_heads, layout.max_seq_len, b.head_dim,
                              device, self.audio_codebook_embeddings.weight.dtype, layout.kv_positions)
        return SlotMemory(
            kv=kv, logits=torch.zeros(num_rows, c.audio_num_codebooks, c.audio_vocab_size, device=device),
            steps=torch.zeros(num_rows, dtype=torch.int64, device=device),
            end_steps=torch.full((num_rows,), NOT_ENDED, dtype=torch.int64, device=device),
            delays=torch.tensor(c.codebook_delays, device=device),
            no_text=torch.zeros(b.hidden_size, device=device, dtype=self.audio_codebook_embeddings.weight.dtype))

    def _build_graphs(self, layout: SlotLayout) -> FrameGraphs:
        return self._two_stage_graphs(layout, self.config.backbone.hidden_size,
                                      self._require_memory().no_text.dtype)

    @property
    def noise_width(self) -> int:
        """Exp(1) draws per sampled row and step: one per id of every codebook."""
        return self.config.audio_num_codebooks * self.config.audio_vocab_size

    # ---- phases --------------------------------------------------------------------------------
    @torch.no_grad()
    def prefill(self, slot: int, prompt: Prompt) -> None:
        mem = self._require_memory()
        if prompt.num_tokens > mem.kv.max_seq_len:
            raise ValueError(f"prompt of {prompt.num_tokens} tokens exceeds max_seq_len {mem.kv.max_seq_len}")
        embeds = self.prompt_embeds(prompt)[None]  # [1, L, H]
        rows = to_device([slot], self.device)
        positions = torch.arange(embeds.shape[1], device=self.device)[None]
        hidden = self.model.run(embeds, rows, positions, mem.kv)  # [1, H]
        mem.logits[slot] = self.audio_logits(hidden)[0]
        mem.steps[slot], mem.end_steps[slot] = 0, NOT_ENDED
        self._states[slot] = SlotState(position=embeds.shape[1])

    def prompt_embeds(self, prompt: Prompt) -> torch.Tensor:
        """[L, H]: text embeddings, and each AUDIO position's row embedded as the sum of its codebooks'."""
        ids = prompt.tensors["ids"].to(self.device)
        is_audio = ids == AUDIO
        embeds = self.model.embed_tokens(ids.clamp_min(0))
        audio = self.embed_audio(prompt.tensors["rows"].to(self.device))  # [A, H]
        return embeds.masked_scatter(is_audio[:, None], audio.to(embeds.dtype))

    def embed_audio(self, rows: torch.Tensor) -> torch.Tensor:
        """rows [N, K] int64 (ids < codebook_size + 2) -> [N, H]: the reference's `_embed_audio_ids`."""
        shift = torch.arange(rows.shape[-1], device=rows.device) * self.config.audio_vocab_size
        return self.audio_codebook_embeddings(rows + shift).sum(dim=-2)

    def audio_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [B, H] -> [B, K, V] float32."""
        c = self.config
        return self.audio_decoder_proj.audio_lm_head(hidden).view(-1, c.audio_num_codebooks, c.audio_vocab_size).float()

    @torch.no_grad()
    def decode(self, batch: DecodeBatch) -> tuple[torch.Tensor, torch.Tensor]:
        mem, states = self._require_memory(), [self._live_state(slot) for slot in batch.slots]
        codes = self._two_stage_frame(batch, [[slot, s.position, int(ignore)] for slot, s, ignore
                                              in zip(batch.slots, states, batch.ignore_eos)], [mem.no_text] * len(states))
        for s in states:
            s.position += 1
        return codes, codes[:, 0] == self.config.audio_stream_eos_id

    def _predict(self, inputs: FrameInputs) -> tuple[torch.Tensor, torch.Tensor]:
        """Each row's delayed row of K codes from its stored logits -> (codes [B, K] int64, row embedding [B, H])."""
        mem, c, rows = self._require_memory(), self.config, inputs.rows
        logits = mem.logits[rows].masked_fill(self._blocked(mem, inputs), float("-inf"))  # [B, K, V]
        noise = inputs.noise.clamp_min(TINY).view(-1, c.audio_vocab_size)  # a zero draw would give 0/0 = NaN
        sampled = sample(logits.flatten(0, 1), inputs.sampling.repeat_rows(c.audio_num_codebooks), noise)
        codes = self._delayed(mem, rows, sampled.view(-1, c.audio_num_codebooks))
        return codes, self.embed_audio(codes)

    def _blocked(self, mem: SlotMemory, inputs: FrameInputs) -> torch.Tensor:
        """[B, K, V] bool: begin-of-stream everywhere; end-of-stream on codebook 0 where EOS is blocked, and on
        codebooks 1.. until codebook 0 has ended (then, as in the reference, they sample freely at the end frame)."""
        c, num_rows = self.config, inputs.rows.shape[0]
        blocked = torch.zeros(num_rows, c.audio_num_codebooks, c.audio_vocab_size, dtype=torch.bool,
                              device=inputs.rows.device)
        blocked[:, :, c.audio_stream_bos_id] = True
        blocked[:, 0, c.audio_stream_eos_id] = inputs.is_eos_blocked
        blocked[:, 1:, c.audio_stream_eos_id] = (mem.end_steps[inputs.rows] == NOT_ENDED)[:, None]
        return blocked

    def _delayed(self, mem: SlotMemory, rows: torch.Tensor, sampled: torch.Tensor) -> torch.Tensor:
        """The sampled codes [B, K] with the delay pattern's padding: begin-of-stream before a codebook's frame
        0, end-of-stream after the end frame E (the reference's countdown: codebook j is forced from frame E + 1,
        its frame E is sampled and never read); records the end (codebook 0's end-of-stream), counts the step."""
        c, steps = self.config, mem.steps[rows]  # [B]
        ended = (sampled[:, 0] == c.audio_stream_eos_id) & (mem.end_steps[rows] == NOT_ENDED)
        end_steps = torch.where(ended, steps, mem.end_steps[rows])
        frames = steps[:, None] - mem.delays  # [B, K], the frame each codebook holds
        codes = sampled.masked_fill(frames < 0, c.audio_stream_bos_id)
        codes = codes.masked_fill(frames > end_steps[:, None], c.audio_stream_eos_id)
        mem.end_steps.index_copy_(0, rows, end_steps)
        mem.steps.index_copy_(0, rows, steps + 1)
        return codes

    def _talk(self, inputs: FrameInputs, row_embed: torch.Tensor) -> None:
        """One backbone token per row (row_embed [B, H]); stores the next step's logits."""
        mem, rows = self._require_memory(), inputs.rows
        hidden = self.model.run(row_embed[:, None].to(mem.no_text.dtype), rows, inputs.positions[:, None], mem.kv)
        mem.logits[rows] = self.audio_logits(hidden)
