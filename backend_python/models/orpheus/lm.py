"""`OrpheusLM`: the Orpheus Llama backbone behind the `SpeechLM` interface, one 7-token frame per decode.

A decode call runs 7 Llama steps for every row of the batch. Step k samples slot k of the frame
from that slot's band of the vocabulary only (4096 audio tokens, plus END_OF_SPEECH at slot 0),
so the head is computed for the band's rows instead of all 156940 (the same distribution as
masking the full logits). The sampled token is fed back and the next step reads its hidden
state. On CUDA the whole frame runs as one CUDA graph per batch-size bucket (`graphs/step.py`),
captured in `allocate_slots`; on the CPU it runs eagerly on the unpadded batch over the used part
of the cache. Both run `_frame`.

KV positions: the engine counts a slot's length as prompt tokens + frames (`max_seq_len`); a frame
here takes 7 positions, so each slot holds 7 * max_seq_len.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from protocol.quoting import quoted

from ..base import DecodeBatch, Prompt, VoiceReference, to_device
from ..graphs.buffers import batch_buckets
from ..layers.decoder import KVCache
from ..layers.empty_weights import empty_weights
from ..layers.random_init import init_random_weights
from ..layers.sampling import TINY, apply_repetition_penalty, sample
from ..slots import SlotLayout, SlotSpeechLM, SlotState
from ..graphs.step import FrameGraphs, FrameInputs, eager_inputs, frame_columns
from . import checkpoint
from .config import OrpheusConfig
from .frames import slot_token_base
from .tokens import CODES_PER_SLOT, END_OF_SPEECH, FRAME_TOKENS
from .llama import LlamaForCausalLM
from .presets import build_tiny_tokenizer
from .prompt import VOICES, make_prompt, voice_text

SAMPLE_RATE = 24000
SAMPLES_PER_FRAME = 2048  # SNAC 24 kHz: hop 512 x the coarsest level's stride 4
BAND_WIDTH = CODES_PER_SLOT + 1  # a slot's sampled columns: its 4096 codes, then END_OF_SPEECH


@dataclass
class SlotMemory:
    """Device tensors for all slots (row s = slot s) plus one scratch row, the last, that the
    padding rows of a CUDA-graph bucket read and write."""

    kv: KVCache  # [layers, slots + 1, 7 * max_seq_len, kv_heads, head_dim]
    hidden: torch.Tensor  # [slots + 1, hidden], normed hidden state of the last token (predicts the next)
    seen: torch.Tensor  # [slots + 1, 7 * 4096] bool, codes emitted so far in each slot band (repetition penalty)

    @property
    def scratch_row(self) -> int:
        return self.hidden.shape[0] - 1


class OrpheusLM(SlotSpeechLM):
    """Parameters live under `backbone.*`; the backbone itself carries the official Llama names."""

    positions_per_frame = FRAME_TOKENS
    languages = ("english",)  # the language it speaks; it takes none, so `language` "english" changes nothing

    def __init__(self, config: OrpheusConfig, tokenizer) -> None:
        super().__init__()
        self.config = config
        self.tokenizer = tokenizer
        self.backbone = LlamaForCausalLM(config)

    # ---- loading -------------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, path: str | Path, device: str | torch.device = "cpu",
                        dtype: torch.dtype = torch.float32) -> "OrpheusLM":
        """Load a checkpoint dir (config.json, model.safetensors[.index.json], tokenizer.json)."""
        config, tokenizer = checkpoint.read_config(path), checkpoint.load_tokenizer(path)
        with empty_weights():
            lm = cls(config, tokenizer)
        lm.backbone.load_state_dict(checkpoint.read_state_dict(path, config), strict=True, assign=True)
        return lm.to(device=device, dtype=dtype).eval()

    @classmethod
    def from_config(cls, config: OrpheusConfig, device: str | torch.device = "cpu",
                    dtype: torch.dtype = torch.float32, seed: int = 0, tokenizer=None) -> "OrpheusLM":
        """Random weights (built on `meta`, materialised on `device`); tokenizer defaults to the tiny BPE."""
        tokenizer = tokenizer if tokenizer is not None else build_tiny_tokenizer()
        with empty_weights():
            lm = cls(config, tokenizer).to(dtype=dtype)
        lm.to_empty(device=device)
        init_random_weights(lm.backbone, seed)
        return lm.eval()

    # ---- SpeechLM properties -------------------------------------------------------------------
    @property
    def num_codebooks(self) -> int:
        return FRAME_TOKENS

    @property
    def frame_rate(self) -> float:
        return SAMPLE_RATE / SAMPLES_PER_FRAME

    @property
    def voices(self) -> tuple[str, ...]:
        return VOICES

    @property
    def device(self) -> torch.device:
        return self.backbone.head_weight.device

    # ---- phases --------------------------------------------------------------------------------
    def encode_prompt(self, text: str, voice: str | None, reference: VoiceReference | None = None) -> Prompt:
        """voice None -> the first voice ("tara")."""
        self.check_no_reference(reference)
        ids = self.tokenizer(voice_text(text, self._resolve_voice(voice)))["input_ids"]
        return make_prompt(list(ids))

    def _fuse_projections(self) -> None:
        self.backbone.fuse_projections()

    def _allocate_memory(self, layout: SlotLayout) -> SlotMemory:
        device, dtype = self.device, self.backbone.head_weight.dtype
        num_rows = layout.num_slots + 1
        return SlotMemory(
            kv=self.backbone.allocate_cache(num_rows, FRAME_TOKENS * layout.max_seq_len, device, dtype,
                                            layout.kv_positions),
            hidden=torch.zeros(num_rows, self.config.hidden_size, device=device, dtype=dtype),
            seen=torch.zeros(num_rows, FRAME_TOKENS * CODES_PER_SLOT, device=device, dtype=torch.bool))

    def _build_graphs(self, layout: SlotLayout) -> FrameGraphs:
        mem = self._require_memory()
        buckets = batch_buckets(self.graph_batch_sizes, layout.batch)
        graphs = FrameGraphs(lambda inputs: self._frame(inputs, mem.kv), buckets, mem.scratch_row, self.noise_width,
                             FRAME_TOKENS, self.device)
        return self._capture_graphs(graphs)

    @property
    def noise_width(self) -> int:
        """Exp(1) draws per sampled row and frame: one band per slot."""
        return FRAME_TOKENS * BAND_WIDTH

    @torch.no_grad()
    def prefill(self, slot: int, prompt: Prompt) -> None:
        mem = self._require_memory()
        if prompt.num_tokens > mem.kv.max_seq_len:
            raise ValueError(f"prompt of {prompt.num_tokens} tokens exceeds the cache's {mem.kv.max_seq_len}")
        ids = prompt.tensors["input_ids"].to(self.device, non_blocking=True)[None]  # [1, L]
        rows = to_device([slot], self.device)
        positions = torch.arange(ids.shape[1], device=self.device)[None]
        mem.hidden[slot] = self.backbone(ids, rows, positions, self._require_memory().kv.upto(ids.shape[1]))[0]
        mem.seen[slot] = False
        self._states[slot] = SlotState(position=ids.shape[1])

    @torch.no_grad()
    def decode(self, batch: DecodeBatch) -> tuple[torch.Tensor, torch.Tensor]:
        states = [self._live_state(slot) for slot in batch.slots]
        floats, ints = frame_columns(batch, states)
        if self._graphs is not None:
            codes = self._graphs.run(floats, ints, batch.sampling, batch.generators, self.use_cuda_graphs)
        else:
            codes = self._decode_eager(batch, floats, ints, max(s.position for s in states) + FRAME_TOKENS)
        for s in states:
            s.position += FRAME_TOKENS
        is_eos = codes[:, 0] == CODES_PER_SLOT
        return codes.clamp(max=CODES_PER_SLOT - 1), is_eos  # an EOS row's codes are meaningless

    # ---- helpers -------------------------------------------------------------------------------
    def _resolve_voice(self, voice: str | None) -> str:
        if voice is None:
            return self.voices[0]
        if voice.lower() not in self.voices:
            raise ValueError(f"unknown voice {quoted(voice)}; known voices: {list(self.voices)}")
        return voice.lower()

    def _decode_eager(self, batch: DecodeBatch, floats: torch.Tensor, ints: torch.Tensor,
                      num_positions: int) -> torch.Tensor:
        """The unpadded, ungraphed frame (CPU)."""
        inputs = eager_inputs(batch, floats, ints, self.noise_width, self.device)
        return self._frame(inputs, self._require_memory().kv.upto(num_positions))

    def _frame(self, inputs: FrameInputs, cache: KVCache) -> torch.Tensor:
        """Seven Llama steps -> codes [B, 7] int64 (CODES_PER_SLOT at slot 0 = end of speech). No host sync."""
        mem, rows = self._require_memory(), inputs.rows
        noise = inputs.noise.clamp_min(TINY).view(-1, FRAME_TOKENS, BAND_WIDTH)  # a zero draw would give 0/0
        hidden, codes = mem.hidden[rows], []
        for slot in range(FRAME_TOKENS):
            code = sample(self._band_logits(hidden, slot, inputs), inputs.sampling, noise[:, slot])  # [B]
            # a device value: `seen[rows, i] = True` would copy a CPU scalar, which graph capture forbids
            seen_index = slot * CODES_PER_SLOT + code.clamp(max=CODES_PER_SLOT - 1)  # EOS rows end anyway
            mem.seen.index_put_((rows, seen_index), torch.ones_like(code, dtype=torch.bool))
            token = torch.where(code == CODES_PER_SLOT, END_OF_SPEECH, slot_token_base(slot) + code)
            hidden = self.backbone(token[:, None], rows, (inputs.positions + slot)[:, None], cache)  # [B, H]
            codes.append(code)
        mem.hidden[rows] = hidden
        return torch.stack(codes, dim=1)

    def _band_logits(self, hidden: torch.Tensor, slot: int, inputs: FrameInputs) -> torch.Tensor:
        """hidden [B, H] -> [B, 4097] float32: slot's 4096 codes (repetition-penalised), then END_OF_SPEECH
        (allowed at slot 0 only, unless the row ignores EOS)."""
        base, weight = slot_token_base(slot), self.backbone.head_weight
        band = F.linear(hidden, weight[base:base + CODES_PER_SLOT]).float()
        seen = self._require_memory().seen[inputs.rows, slot * CODES_PER_SLOT:(slot + 1) * CODES_PER_SLOT]
        band = apply_repetition_penalty(band, seen, inputs.sampling.repetition_penalty)
        eos = F.linear(hidden, weight[END_OF_SPEECH:END_OF_SPEECH + 1]).float()  # [B, 1]
        blocked = inputs.is_eos_blocked[:, None] if slot == 0 else torch.ones_like(eos, dtype=torch.bool)
        return torch.cat((band, eos.masked_fill(blocked, float("-inf"))), dim=1)
