"""`FlashTTSLM`: FlashTTS's speech LM behind the `SpeechLM` interface, `inference_head_num` speech tokens per step.

The backbone, the slots, sampling, the CUDA graphs and the feedback of a step's tokens are `SpeechTokenLM`'s
(models/speech_token_lm.py: CosyVoice 2's Qwen2 LM, `llm.pt` names). What is FlashTTS's own:
- the prompt (prompt.py): two positions, the speaker embedding through `spk_embed_convert`, and a text track that
  rides along the speech tokens: every fed-back token at position p carries text token p (`step_hidden`), as
  its `inference_wrapper_mtp` appends speech_embedding(token) + text embedding for each accepted token;
- the MTP blocks (mtp.py): token j of a step is sampled from `llm_decoder(mtp_block[j](h))`, h the backbone's
  last hidden state; all M tokens are fed back (M KV positions), and the last one's hidden state is the next
  step's h. Each block samples with the request's sampling settings and generator (its own noise block), the
  repetition penalty over the tokens before the step (FlashTTS's `decoded_snapshot`);
- the frame limits: end of speech blocked before 2 tokens per text token (for the whole step: FlashTTS blocks
  it per token, so a step may end up to M - 1 tokens later than it would) and forced at 20.

Not modelled: FlashTTS's `inference_wrapper_mtp_fast_check` (the backbone's own head checks the previous step's
MTP tokens against its top-k and rolls back: speculative decoding, a variable number of tokens per step), its
repetition-aware sampling (our per-request top-k / top-p / penalty instead) and classifier-free guidance.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from protocol.quoting import quoted

from ..base import Prompt, VoiceReference
from ..layers.decoder import KVCache
from ..layers.sampling import sample
from ..graphs.step import FrameInputs
from ..slots import SlotLayout
from ..speech_token_lm import SlotMemory, SpeechTokenLM
from . import checkpoint
from .config import FlashTTSConfig
from .mtp import MTPBlock
from .presets import build_tiny_tokenizer
from .prompt import TEXT_IDS, VOICE, make_prompt

NO_TEXT = -1  # text_ids where the text track has run out


@dataclass
class TextSlotMemory(SlotMemory):
    """The shared slot memory plus each slot's text track."""

    text_ids: torch.Tensor  # [slots + 1, max_seq_len] int64: the text token fed at each position (NO_TEXT: none)
    text_tag: torch.Tensor  # [slots + 1] int64: the text's first token, added to each of its other tokens


class FlashTTSLM(SpeechTokenLM):
    """Parameters carry FlashTTS's llm.pt names: `llm.model.model.*`, `speech_embedding`, `llm_decoder`,
    `spk_embed_convert`, `llm_embedding` (held for the checkpoint, unused by its inference), `mtp_block.N.*`."""

    def __init__(self, config: FlashTTSConfig, tokenizer, voices: dict[str, torch.Tensor] | None = None) -> None:
        super().__init__(config.llm, config.speech_vocab, tokenizer)
        self.config = config
        self.frames_per_step = config.inference_head_num
        hidden = config.llm.hidden_size
        self.llm_embedding = nn.Embedding(2, hidden)
        self.spk_embed_convert = nn.Linear(config.speaker_embedding_dim, hidden)
        self.mtp_block = nn.ModuleList(MTPBlock(hidden, config.mtp_intermediate_size) for _ in range(config.head_num))
        self.voice_vectors = checkpoint.check_voices(config, voices or {})  # name -> [320] float32, on the CPU

    # ---- loading -------------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, path: str | Path, device: str | torch.device = "cpu",
                        dtype: torch.dtype = torch.float32) -> "FlashTTSLM":
        """Our checkpoint directory (checkpoint.py)."""
        return cls.build_loaded(checkpoint.read_config(path), checkpoint.load_tokenizer(path),
                                checkpoint.read_voices(path), checkpoint.read_state_dict(path), device, dtype)

    @classmethod
    def from_config(cls, config: FlashTTSConfig, device: str | torch.device = "cpu",
                    dtype: torch.dtype = torch.float32, seed: int = 0, tokenizer=None) -> "FlashTTSLM":
        """Random weights and random preset voices (built on `meta`, materialised on `device`); the tokenizer
        defaults to the tiny BPE."""
        tokenizer = tokenizer if tokenizer is not None else build_tiny_tokenizer()
        return cls.build_random(config, tokenizer, checkpoint.random_voices(config, seed), device, dtype, seed)

    # ---- prompts -------------------------------------------------------------------------------
    def encode_prompt(self, text: str, voice: str | None, reference: VoiceReference | None = None) -> Prompt:
        """voice None -> the first preset voice (none: zeros, the codec's default)."""
        self.check_no_reference(reference)
        if not text.strip():
            raise ValueError("text must not be empty")
        ids = self.tokenizer(self.config.text_prefix + text)["input_ids"]
        return make_prompt(list(ids), self._voice_vector(voice))

    def codec_condition(self, prompt: Prompt) -> torch.Tensor:
        """The voice [speaker embedding (192) | reference embedding (128)] float32, the DiT's condition."""
        return prompt.tensors[VOICE]

    def prompt_embeddings(self, prompt: Prompt) -> torch.Tensor:
        """[sot + speaker, text_1 + tag + sos]: [2, hidden] (prompt.py)."""
        device, cfg = self.device, self.config
        text = self.backbone.embed_text(prompt.tensors[TEXT_IDS][:2].to(device))  # the tag, the first text token
        sot, sos = self.backbone.embed_text(torch.tensor([cfg.sot_token_id, cfg.sos_token_id], device=device))
        speaker = F.normalize(prompt.tensors[VOICE][:cfg.speaker_embedding_dim].to(device), dim=0)
        speaker = self.spk_embed_convert(speaker.to(self.spk_embed_convert.weight.dtype))
        return torch.stack((sot + speaker, text[1] + text[0] + sos))

    def frame_limits(self, prompt: Prompt) -> tuple[int, int | None]:
        return self.config.frame_limits(prompt.tensors[TEXT_IDS].shape[0])

    # ---- slots ---------------------------------------------------------------------------------
    def _allocate_memory(self, layout: SlotLayout) -> TextSlotMemory:
        mem = super()._allocate_memory(layout)
        rows = mem.hidden.shape[0]
        return TextSlotMemory(mem.kv, mem.hidden, mem.seen,
                              text_ids=torch.full((rows, layout.max_seq_len), NO_TEXT, device=self.device),
                              text_tag=torch.zeros(rows, dtype=torch.long, device=self.device))

    @torch.no_grad()
    def prefill(self, slot: int, prompt: Prompt) -> None:
        mem, ids = self._require_memory(), prompt.tensors[TEXT_IDS]
        if ids.shape[0] > mem.kv.max_seq_len:
            raise ValueError(f"a text of {ids.shape[0]} tokens exceeds the slot's {mem.kv.max_seq_len} positions")
        super().prefill(slot, prompt)
        mem.text_ids[slot].fill_(NO_TEXT)
        mem.text_ids[slot, :ids.shape[0]] = ids.to(self.device)
        mem.text_tag[slot] = ids[0]

    # ---- the decode step -----------------------------------------------------------------------
    def sample_frames(self, hidden: torch.Tensor, inputs: FrameInputs, noise: torch.Tensor) -> torch.Tensor:
        """Token j from block j's logits and noise block j -> [B, M] int64 (num_codes = end of speech)."""
        blocks = noise.view(noise.shape[0], self.frames_per_step, self.vocab.num_columns)
        return torch.stack([sample(self.speech_logits(block(hidden), inputs), inputs.sampling, blocks[:, j])
                            for j, block in enumerate(self.mtp_block[:self.frames_per_step])], dim=1)

    def step_hidden(self, tokens: torch.Tensor, inputs: FrameInputs, cache: KVCache) -> torch.Tensor:
        """Feed the step's M tokens back at the rows' next M positions, each with its position's text token
        (speech track + text track) -> the last hidden state [B, hidden]."""
        ids = torch.where(tokens == self.vocab.num_codes, self.vocab.eos, tokens)
        positions = inputs.positions[:, None] + torch.arange(tokens.shape[1], device=tokens.device)
        embeds = self.speech_embedding(ids) + self.text_track(inputs.rows, positions)
        return self.hidden_states(embeds, inputs.rows, positions, cache)[:, -1]

    def text_track(self, rows: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """rows [B], positions [B, M] -> [B, M, hidden]: embed(text token) + embed(tag) where the text lasts,
        else zeros. No host sync."""
        mem = self._require_memory()
        ids = mem.text_ids[rows[:, None], positions]
        track = self.backbone.embed_text(ids.clamp(min=0)) + self.backbone.embed_text(mem.text_tag[rows])[:, None]
        return track * (ids != NO_TEXT)[..., None].to(track.dtype)

    # ---- helpers -------------------------------------------------------------------------------
    def _voice_vector(self, voice: str | None) -> torch.Tensor:
        """The voice's [speaker | reference] embedding: the named voice's, the first voice's, or zeros."""
        if voice is None:
            return next(iter(self.voice_vectors.values()), torch.zeros(self.config.condition_dim))
        if voice not in self.voice_vectors:
            raise ValueError(f"unknown voice {quoted(voice)}; known voices: {list(self.voices)}")
        return self.voice_vectors[voice]
