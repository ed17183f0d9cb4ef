"""`CsmLM`: the CSM backbone + depth decoder behind the `SpeechLM` interface.

One decode step per frame, batched over slots: sample codebook 0 from each slot's stored backbone
logits, run the depth decoder for codebooks 1..K-1, then one backbone step on the sum of the K
codebook embeddings. Ids from the codec's codebook size up (2048..2050 for the real model) are
masked everywhere: they are not audio and crash Mimi. A frame whose codebooks 0..K-2 are all
`codebook_eos_token_id` ends the audio, as in transformers' CSM generate. On CUDA the frame runs
as two CUDA graphs per batch-size bucket (`graphs/frame.py` FrameGraphs), captured in
`allocate_slots`; on the CPU it runs eagerly on the unpadded batch. Both run `_predict` and `_talk`.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ..base import DecodeBatch, Prompt, TextFeed, VoiceReference, to_device
from ..graphs.frame import FrameGraphs, FrameInputs, TwoStageFrameLM
from ..layers.decoder import KVCache
from ..layers.empty_weights import empty_weights
from ..layers.random_init import init_random_weights
from ..layers.sampling import TINY, apply_repetition_penalty, sample
from ..slots import SlotLayout, SlotSpeechLM, SlotState
from ..text_segments import SegmentContext, SegmentedText
from . import checkpoint
from .backbone import BackboneModel
from .config import CsmConfig
from .depth_decoder import CodebooksHead, DepthDecoder
from .presets import build_tiny_tokenizer
from .prompt import (audio_turns, make_prompt, reference_codes, reference_transcript, resolve_speaker, with_context,
                     with_reference)

MAX_CONTEXT_S = 20.0  # a longer segment is not given to the next one as context (it would crowd the KV cache)


@dataclass
class SlotMemory:
    """Device tensors for all slots (row s = slot s) plus one scratch row, the last, that the
    padding rows of a CUDA-graph bucket read and write."""

    kv: KVCache  # backbone: [layers, slots, max_seq_len, kv_heads, head_dim]
    depth_kv: KVCache  # depth decoder: [layers, slots, num_codebooks, kv_heads, head_dim]
    logits: torch.Tensor  # [slots, vocab] float32, next codebook-0 logits
    hidden: torch.Tensor  # [slots, hidden], last backbone hidden state (input of the depth decoder)
    seen: torch.Tensor  # [slots, vocab] bool, codebook-0 codes emitted so far (repetition penalty)
    blocked: torch.Tensor  # [vocab] bool, ids that are not audio codes (never sampled)
    no_text: torch.Tensor  # [hidden] zeros: CSM adds no text to decode inputs (FrameInputs.text_embed)

    @property
    def scratch_row(self) -> int:
        return self.logits.shape[0] - 1


class CsmLM(TwoStageFrameLM, SlotSpeechLM):
    """Parameters carry the official `CsmForConditionalGeneration` names (without `codec_model.*`)."""

    def __init__(self, config: CsmConfig, tokenizer) -> None:
        super().__init__()
        self.config = config
        self.tokenizer = tokenizer
        self.lm_head = nn.Linear(config.backbone.hidden_size, config.vocab_size, bias=False)
        self.embed_text_tokens = nn.Embedding(config.text_vocab_size, config.backbone.hidden_size)
        self.backbone_model = BackboneModel(config)
        self.depth_decoder = DepthDecoder(config.depth_decoder)

    # ---- loading -------------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, path: str | Path, device: str | torch.device = "cpu",
                        dtype: torch.dtype = torch.float32) -> "CsmLM":
        """Load a checkpoint dir (config.json, model.safetensors[.index.json], tokenizer files)."""
        config, tokenizer = checkpoint.read_config(path), checkpoint.load_tokenizer(path)
        with empty_weights():
            lm = cls(config, tokenizer)
        lm.load_state_dict(checkpoint.read_lm_state_dict(path, config), strict=True, assign=True)
        lm.tie_codebook_embeddings()
        return lm.to(device=device, dtype=dtype).eval()

    @classmethod
    def from_config(cls, config: CsmConfig, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
                    seed: int = 0, tokenizer=None) -> "CsmLM":
        """Random weights (built on `meta`, materialised on `device`); tokenizer defaults to the tiny BPE."""
        tokenizer = tokenizer if tokenizer is not None else build_tiny_tokenizer()
        with empty_weights():
            lm = cls(config, tokenizer).to(dtype=dtype)
        lm.to_empty(device=device)
        init_random_weights(lm, seed, matrices=(CodebooksHead,))
        lm.tie_codebook_embeddings()
        return lm.eval()

    def tie_codebook_embeddings(self) -> None:
        """One audio table for the backbone and the depth decoder, as transformers ties them."""
        if self.config.tie_codebooks_embeddings:
            self.depth_decoder.model.embed_tokens.weight = self.backbone_model.embed_tokens.embed_audio_tokens.weight

    # ---- SpeechLM properties -------------------------------------------------------------------
    @property
    def num_codebooks(self) -> int:
        return self.config.num_codebooks

    @property
    def frame_rate(self) -> float:
        return self.config.frame_rate

    @property
    def voices(self) -> tuple[str, ...]:
        return self.config.speakers

    @property
    def device(self) -> torch.device:
        return self.lm_head.weight.device

    # ---- phases --------------------------------------------------------------------------------
    supports_reference = True
    languages = ("english",)  # the language it speaks; it takes none, so `language` "english" changes nothing

    def encode_prompt(self, text: str, voice: str | None, reference: VoiceReference | None = None) -> Prompt:
        """voice None -> the first speaker; the prompt is "[{speaker}]{text}" with the checkpoint's specials.
        A reference clones its voice in context: its transcript and codes come first, as a turn of the same
        speaker (CSM has no speaker embedding, so a reference without its transcript is a ValueError)."""
        speaker = resolve_speaker(self.voices, voice)
        prompt = make_prompt(self.tokenizer, speaker, text)
        if reference is None:
            return prompt
        transcript = make_prompt(self.tokenizer, speaker, reference_transcript(reference))
        return with_reference(prompt, transcript, reference_codes(reference, self.num_codebooks,
                                                                  self.config.codebook_size))

    def encode_segment(self, text: str, voice: str | None, context: SegmentContext | None,
                       reference: VoiceReference | None = None) -> Prompt:
        """A segment of streamed text, after the segment before it as context (its text and audio), as CSM
        conditions on a conversation; a context longer than MAX_CONTEXT_S is left out. A cloned voice's
        reference comes first in every segment, so each one hears the voice it clones, not only its copy."""
        prompt = self.encode_prompt(text, voice, reference)
        if context is None or not 0 < context.frames.shape[0] <= MAX_CONTEXT_S * self.frame_rate:
            return prompt
        return with_context(prompt, self.encode_prompt(context.text, voice), context.frames)

    def open_text(self, voice: str | None, reference: VoiceReference | None = None) -> TextFeed:
        """A streamed text, spoken segment by segment (text_segments.py), cloning `reference`'s voice in each
        segment; the voice and the reference are refused now, not at the first segment. Without a reference
        it is the feed `text_segments.open_streamed_text` builds."""
        resolve_speaker(self.voices, voice)
        if reference is not None:
            reference_transcript(reference)
            reference_codes(reference, self.num_codebooks, self.config.codebook_size)
        return SegmentedText(lambda text, context: self.encode_segment(text, voice, context, reference),
                             self.frame_rate)

    def _fuse_projections(self) -> None:
        self.backbone_model.fuse_projections()
        self.depth_decoder.model.fuse_projections()

    def _allocate_memory(self, layout: SlotLayout) -> SlotMemory:
        c, device, dtype = self.config, self.device, self.lm_head.weight.dtype
        blocked = torch.zeros(c.vocab_size, dtype=torch.bool, device=device)
        blocked[c.codebook_size:] = True
        num_rows = layout.num_slots + 1
        return SlotMemory(
            kv=self.backbone_model.allocate_cache(num_rows, layout.max_seq_len, device, dtype, layout.kv_positions),
            depth_kv=self.depth_decoder.allocate_cache(layout.batch, device, dtype),
            logits=torch.zeros(num_rows, c.vocab_size, device=device),
            hidden=torch.zeros(num_rows, c.backbone.hidden_size, device=device, dtype=dtype),
            seen=torch.zeros(num_rows, c.vocab_size, device=device, dtype=torch.bool),
            blocked=blocked, no_text=torch.zeros(c.backbone.hidden_size, device=device, dtype=dtype))

    def _build_graphs(self, layout: SlotLayout) -> FrameGraphs:
        return self._two_stage_graphs(layout, self.config.backbone.hidden_size, self._require_memory().hidden.dtype)

    @property
    def noise_width(self) -> int:
        """Exp(1) draws per sampled row and frame: codebook 0, then each depth-decoder step."""
        return self.config.num_codebooks * self.config.vocab_size

    @torch.no_grad()
    def prefill(self, slot: int, prompt: Prompt) -> None:
        mem = self._require_memory()
        if prompt.num_tokens > mem.kv.max_seq_len:
            raise ValueError(f"prompt of {prompt.num_tokens} tokens exceeds max_seq_len {mem.kv.max_seq_len}")
        embeds = self._prompt_embeds(prompt)[None]  # [1, L, H]
        rows = to_device([slot], self.device)
        positions = torch.arange(embeds.shape[1], device=self.device)[None]  # [1, L]
        hidden = self.backbone_model.run(embeds, rows, positions, mem.kv)  # [1, H]
        mem.hidden[slot], mem.logits[slot] = hidden[0], self.lm_head(hidden)[0].float()
        mem.seen[slot] = False
        self._states[slot] = SlotState(position=embeds.shape[1])

    def _prompt_embeds(self, prompt: Prompt) -> torch.Tensor:
        """The prompt's input embeddings [L, H]: its audio turns (a reference, the segment before), each its
        text tokens, audio frames and end-of-audio frame (all codebooks `codebook_eos_token_id`), then the text."""
        parts = []
        for ids, codes in audio_turns(prompt):
            codes = codes.to(self.device)  # [T, K]
            end = torch.full_like(codes[:1], self.config.codebook_eos_token_id)
            parts += [self.embed_text_tokens(ids.to(self.device)),
                      self.backbone_model.embed_tokens(torch.cat((codes, end)))]
        parts.append(self.embed_text_tokens(prompt.tensors["text_ids"].to(self.device)))
        return torch.cat(parts)

    @torch.no_grad()
    def decode(self, batch: DecodeBatch) -> tuple[torch.Tensor, torch.Tensor]:
        mem, states = self._require_memory(), [self._live_state(slot) for slot in batch.slots]
        # EOS is a whole frame here, never a blocked id: the column stays 0
        codes = self._two_stage_frame(batch, [[slot, s.position, 0] for slot, s in zip(batch.slots, states)],
                                      [mem.no_text] * len(states))
        for s in states:
            s.position += 1
        is_eos = (codes[:, :-1] == self.config.codebook_eos_token_id).all(dim=1)
        return codes, is_eos & ~to_device(batch.ignore_eos, codes.device)

    # ---- helpers -------------------------------------------------------------------------------

    def _predict(self, inputs: FrameInputs) -> tuple[torch.Tensor, torch.Tensor]:
        """Codebook 0 from the stored logits, then codebooks 1..K-1 -> (codes [B, K] int64, frame_embed [B, H])."""
        mem, c = self._require_memory(), self.config
        noise = inputs.noise.clamp_min(TINY)  # a zero draw would turn a zero-probability token into 0/0 = NaN
        code0 = self._sample_code0(mem, inputs, noise[:, :c.vocab_size])  # [B]
        step_noise = noise[:, c.vocab_size:].view(-1, c.num_codebooks - 1, c.vocab_size)
        rest = self.depth_decoder.generate(mem.hidden[inputs.rows], code0, mem.depth_kv, inputs.sampling,
                                           step_noise, mem.blocked)
        codes = torch.cat((code0[:, None], rest), dim=1)
        return codes, self.backbone_model.embed_tokens(codes)

    def _sample_code0(self, mem: SlotMemory, inputs: FrameInputs, noise: torch.Tensor) -> torch.Tensor:
        rows, s = inputs.rows, inputs.sampling
        logits = apply_repetition_penalty(mem.logits[rows], mem.seen[rows], s.repetition_penalty)
        code0 = sample(logits.masked_fill(mem.blocked, float("-inf")), s, noise)
        # a device value: `seen[rows, code0] = True` would copy a CPU scalar, which graph capture forbids
        mem.seen.index_put_((rows, code0), torch.ones_like(code0, dtype=torch.bool))
        return code0

    def _talk(self, inputs: FrameInputs, frame_embed: torch.Tensor) -> None:
        """One backbone token per row (frame_embed: [B, H]); stores the next logits and hidden state."""
        mem, rows = self._require_memory(), inputs.rows
        hidden = self.backbone_model.run(frame_embed[:, None], rows, inputs.positions[:, None], mem.kv)  # [B, H]
        mem.hidden[rows], mem.logits[rows] = hidden, self.lm_head(hidden).float()
