"""`ZonosLM`: the Zonos transformer behind the `SpeechLM` interface, one delayed row of 9 codes per decode step.

The reference's generation, as one batched step per live stream:
- Prefill writes the conditional prefix (phonemes, speaker, emotion, …: `prompt.py`) into the stream's
  conditional KV row and the unconditional prefix into its unconditional row: classifier-free guidance runs every
  stream as two backbone rows, so a stream's KV position holds both (`kv_bytes_per_position` counts them; the
  pool, and so admission, sees a stream's true cost).
- Step s feeds the row of step s - 1 (all `masked_token_id` at s = 0: the reference's first delayed column), sums
  the 9 code embeddings, runs both rows one position, and mixes the heads' logits as
  uncond + cfg_scale * (cond - uncond). Codebooks 1..8 may never end the speech; codebook 0 may (unless the row
  ignores EOS). Each codebook samples from its logits with the request's settings (repetition penalty over the
  last two rows, as the reference's window of 2).
- Codebook j of step s belongs to frame s - j (`config.codebook_delays`): a frame before 0 keeps
  `masked_token_id`, so does one past the end, and frame E (codebook 0's end at step E) takes `eos_token_id` in
  every codebook as its step comes: the rows the reference feeds back. The engine assembles frames from these rows
  and runs the countdown (models/delay_pattern.py).
A cloned voice is a reference's 128-d speaker embedding (`voice_encoder.py`) in the speaker's place. On CUDA the
step is one CUDA graph per batch-size bucket (`graphs/step.py`); on the CPU it runs eagerly on the unpadded batch.
Both run `_frame`.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ..base import DecodeBatch, Prompt, TextFeed, VoiceReference, to_device
from ..graphs.buffers import batch_buckets
from ..layers.decoder import KVCache
from ..layers.empty_weights import empty_weights
from ..layers.random_init import init_random_weights
from ..layers.sampling import TINY, sample
from ..slots import SlotLayout, SlotSpeechLM, SlotState
from ..graphs.step import FrameGraphs, FrameInputs, eager_inputs, frame_columns
from ..text_segments import SegmentedText
from . import checkpoint
from .backbone import ZonosBackbone
from .conditioning import FourierConditioner, PrefixConditioner
from .config import EMBEDDING_ROWS, HEAD_COLUMNS, ZonosConfig
from .prompt import DEFAULT_VOICE, make_prompt, resolve_voice
from .step_rules import NO_END, delayed_row, mask_eos, penalise, per_codebook
from .voice_encoder import SPEAKER_EMBEDDING

CFG_SCALE = 2.0  # the reference's default guidance scale
SAMPLE_RATE = 44_100
SAMPLES_PER_FRAME = 512  # DAC 44 kHz's hop


@dataclass
class SlotMemory:
    """Device tensors of all slots (row s = slot s) plus the scratch row, the last, for padding rows.

    The KV cache has two rows per slot: the conditional one (s) and the unconditional one (s + uncond_offset)."""

    kv: KVCache  # [layers, positions, kv_heads, head_dim]
    uncond_offset: int  # cache row of slot s's unconditional half: s + uncond_offset
    row: torch.Tensor  # [slots + 1, K] int64, the delayed row the next step feeds
    prev_row: torch.Tensor  # [slots + 1, K] int64, the row before it (repetition penalty window)
    steps: torch.Tensor  # [slots + 1] int64, steps run since prefill
    end_step: torch.Tensor  # [slots + 1] int64, the step codebook 0 ended at (NO_END: not yet)

    @property
    def scratch_row(self) -> int:
        return self.row.shape[0] - 1


class ZonosLM(SlotSpeechLM):
    """Parameters carry the official names: `backbone.*`, `prefix_conditioner.*`, `embeddings.{j}`, `heads.{j}`.
    `voices`: name -> 128-d speaker embedding; the default voice (None) is the learned unconditional speaker."""

    languages = ("english",)  # our text front end spells English (prompt.py); `language` changes nothing

    def __init__(self, config: ZonosConfig, voices: dict[str, torch.Tensor], cfg_scale: float = CFG_SCALE) -> None:
        super().__init__()
        self.config = config
        self.cfg_scale = cfg_scale
        self.codebook_delays = config.codebook_delays
        self._voices = {DEFAULT_VOICE: None, **voices}
        d_model = config.backbone.d_model
        self.backbone = ZonosBackbone(config.backbone)
        self.prefix_conditioner = PrefixConditioner(config, d_model)
        self.embeddings = nn.ModuleList(nn.Embedding(EMBEDDING_ROWS, d_model) for _ in range(config.num_codebooks))
        self.heads = nn.ModuleList(nn.Linear(d_model, HEAD_COLUMNS, bias=False) for _ in range(config.num_codebooks))
        self._head_weight: torch.Tensor | None = None  # [K * 1025, d_model], the heads fused (CUDA)

    # ---- loading -------------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, path: str | Path, device: str | torch.device = "cpu",
                        dtype: torch.dtype = torch.float32) -> "ZonosLM":
        """A checkpoint dir: config.json, model.safetensors (official names), voices.safetensors (optional)."""
        config = checkpoint.read_config(path)
        with empty_weights():
            lm = cls(config, checkpoint.read_voices(path))
        lm.load_state_dict(checkpoint.read_lm_state_dict(path), strict=True, assign=True)
        return lm.to(device=device, dtype=dtype).eval()

    @classmethod
    def from_config(cls, config: ZonosConfig, voices: dict[str, torch.Tensor], device: str | torch.device = "cpu",
                    dtype: torch.dtype = torch.float32, seed: int = 0) -> "ZonosLM":
        """Random weights (built on `meta`, materialised on `device`), deterministic in `seed`."""
        with empty_weights():
            lm = cls(config, voices).to(dtype=dtype)
        lm.to_empty(device=device)
        init_weights(lm, seed)
        return lm.eval()

    # ---- SpeechLM properties -------------------------------------------------------------------
    @property
    def num_codebooks(self) -> int:
        return self.config.num_codebooks

    @property
    def frame_rate(self) -> float:
        return SAMPLE_RATE / SAMPLES_PER_FRAME

    @property
    def voices(self) -> tuple[str, ...]:
        return tuple(self._voices)

    @property
    def device(self) -> torch.device:
        return self.embeddings[0].weight.device

    def kv_bytes_per_position(self) -> int:
        """A position of a stream holds its conditional and its unconditional keys and values."""
        return 2 * super().kv_bytes_per_position()

    # ---- phases --------------------------------------------------------------------------------
    supports_reference = True  # a speaker embedding (`voice_encoder.py`); family.load_lm clears it without one

    def encode_prompt(self, text: str, voice: str | None, reference: VoiceReference | None = None) -> Prompt:
        """voice None -> the default (unconditional) speaker; a reference's speaker embedding takes the voice's
        place (its transcript is not used: Zonos clones from the embedding alone)."""
        speaker = resolve_voice(self._voices, voice)
        if reference is not None:
            speaker = self._reference_speaker(reference)
        return make_prompt(text, speaker, len(self.prefix_conditioner.conditioners))

    def open_text(self, voice: str | None, reference: VoiceReference | None = None) -> TextFeed:
        """A streamed text, spoken segment by segment (text_segments.py), each with the voice or the reference's
        speaker; both are refused now, not at the first segment."""
        resolve_voice(self._voices, voice)
        if reference is not None:
            self._reference_speaker(reference)
        return SegmentedText(lambda text, context: self.encode_prompt(text, voice, reference), self.frame_rate)

    def _reference_speaker(self, reference: VoiceReference) -> torch.Tensor:
        if not self.supports_reference:
            self.check_no_reference(reference)
        speaker = reference.tensors.get(SPEAKER_EMBEDDING)
        dim = self.prefix_conditioner.speaker_dim
        if speaker is None or speaker.shape != (dim,) or not speaker.is_floating_point():
            raise ValueError(f"a Zonos reference is its {SPEAKER_EMBEDDING!r}: float [{dim}], got "
                             f"{None if speaker is None else (speaker.dtype, tuple(speaker.shape))}")
        return speaker.float()

    def _fuse_projections(self) -> None:
        if self._head_weight is None:
            self._head_weight = torch.cat([head.weight.detach() for head in self.heads])

    def _allocate_memory(self, layout: SlotLayout) -> SlotMemory:
        num_rows, device = layout.num_slots + 1, self.device
        pool = None if layout.kv_positions is None else 2 * layout.kv_positions
        kv = self.backbone.allocate_cache(2 * num_rows, layout.max_seq_len, device, self.embeddings[0].weight.dtype,
                                          pool)
        masked = torch.full((num_rows, self.num_codebooks), self.config.masked_token_id, device=device)
        return SlotMemory(kv=kv, uncond_offset=num_rows, row=masked, prev_row=masked.clone(),
                          steps=torch.zeros(num_rows, dtype=torch.int64, device=device),
                          end_step=torch.full((num_rows,), NO_END, device=device))

    def place(self, slot: int, start: int, num_positions: int) -> None:
        """Both rows of the slot: the conditional one at `start` of the first half of the pool, the
        unconditional one at the same place in the second half."""
        mem = self._require_memory()
        half = mem.kv.scratch_start // 2
        mem.kv.place(slot, start, num_positions)
        mem.kv.place(slot + mem.uncond_offset, half + start, num_positions)
        self._extent_lengths[slot] = num_positions

    def _build_graphs(self, layout: SlotLayout) -> FrameGraphs:
        mem = self._require_memory()
        buckets = batch_buckets(self.graph_batch_sizes, layout.batch)
        graphs = FrameGraphs(lambda inputs: self._frame(inputs, mem.kv), buckets, mem.scratch_row, self.noise_width,
                             self.num_codebooks, self.device)
        return self._capture_graphs(graphs)

    @property
    def noise_width(self) -> int:
        """Exp(1) draws per sampled row and step: one block of head columns per codebook."""
        return self.num_codebooks * HEAD_COLUMNS

    @torch.no_grad()
    def prefill(self, slot: int, prompt: Prompt) -> None:
        mem = self._require_memory()
        if prompt.num_tokens > mem.kv.max_seq_len:
            raise ValueError(f"prompt of {prompt.num_tokens} positions exceeds max_seq_len {mem.kv.max_seq_len}")
        prefixes = self.prefixes(prompt)  # [2, P, d_model]
        rows = to_device([slot, slot + mem.uncond_offset], self.device)
        positions = torch.arange(prefixes.shape[1], device=self.device).expand(2, -1)
        self.backbone(prefixes, rows, positions, mem.kv.upto(prefixes.shape[1]))
        mem.row[slot] = mem.prev_row[slot] = self.config.masked_token_id
        mem.steps[slot], mem.end_step[slot] = 0, NO_END
        self._states[slot] = SlotState(position=prefixes.shape[1])

    def prefixes(self, prompt: Prompt) -> torch.Tensor:
        """The conditional and the unconditional prefix of the prompt: [2, P, d_model]."""
        values = {k: v.to(self.device) for k, v in prompt.tensors.items()}
        return torch.stack((self.prefix_conditioner(values), self.prefix_conditioner(values, is_conditional=False)))

    @torch.no_grad()
    def decode(self, batch: DecodeBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """-> (the delayed rows [B, K] int64: codes, `masked_token_id` outside a codebook's frames,
        `eos_token_id` at the end frame; is_eos [B]: codebook 0 has ended)."""
        states = [self._live_state(slot) for slot in batch.slots]
        floats, ints = frame_columns(batch, states)
        if self._graphs is not None:
            rows = self._graphs.run(floats, ints, batch.sampling, batch.generators, self.use_cuda_graphs)
        else:
            rows = self._decode_eager(batch, floats, ints, max(s.position for s in states) + 1)
        for s in states:
            s.position += 1
        return rows, rows[:, 0] >= self.config.eos_token_id

    # ---- the step ------------------------------------------------------------------------------
    def _decode_eager(self, batch: DecodeBatch, floats: torch.Tensor, ints: torch.Tensor,
                      num_positions: int) -> torch.Tensor:
        """The unpadded, ungraphed step (CPU)."""
        inputs = eager_inputs(batch, floats, ints, self.noise_width, self.device)
        return self._frame(inputs, self._require_memory().kv.upto(num_positions))

    def _frame(self, inputs: FrameInputs, cache: KVCache) -> torch.Tensor:
        """One guided step for every row -> its delayed row [B, K] int64. No host sync."""
        mem, rows = self._require_memory(), inputs.rows
        row = mem.row[rows]  # [B, K]
        logits = self.guided_logits(row, rows, inputs.positions, cache)  # [B, K, 1025]
        logits = penalise(logits, torch.stack((mem.prev_row[rows], row), dim=2), inputs.sampling.repetition_penalty)
        logits = mask_eos(logits, self.config.eos_token_id, inputs.is_eos_blocked)
        b, k, v = logits.shape
        noise = inputs.noise.clamp_min(TINY).view(b * k, v)  # a zero draw would give 0/0
        codes = sample(logits.view(b * k, v), per_codebook(inputs.sampling, k), noise).view(b, k)
        steps, ended = mem.steps[rows], mem.end_step[rows]
        ended = torch.where((codes[:, 0] == self.config.eos_token_id) & (ended == NO_END), steps, ended)
        new_row = delayed_row(codes, steps, ended, self.config)
        mem.prev_row[rows], mem.row[rows] = row, new_row
        mem.steps[rows], mem.end_step[rows] = steps + 1, ended
        return new_row

    def guided_logits(self, row: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor,
                      cache: KVCache) -> torch.Tensor:
        """row [B, K] fed at positions [B] into both halves -> uncond + cfg_scale * (cond - uncond) [B, K, 1025]."""
        mem = self._require_memory()
        x = self.embed_codes(row).repeat(2, 1)[:, None]  # [2B, 1, d_model]
        both = torch.cat((rows, rows + mem.uncond_offset))
        hidden = self.backbone(x, both, positions.repeat(2)[:, None], cache)[:, -1]  # [2B, d_model]
        cond, uncond = self.apply_heads(hidden).chunk(2)
        return uncond + (cond - uncond) * self.cfg_scale

    def embed_codes(self, row: torch.Tensor) -> torch.Tensor:
        """row [B, K] -> the sum of its codebooks' embeddings [B, d_model]."""
        return sum(embedding(row[:, j]) for j, embedding in enumerate(self.embeddings))

    def apply_heads(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [B, d_model] -> logits [B, K, 1025] float32."""
        if self._head_weight is not None:
            return nn.functional.linear(hidden, self._head_weight).float().view(hidden.shape[0], -1, HEAD_COLUMNS)
        return torch.stack([head(hidden) for head in self.heads], dim=1).float()


@torch.no_grad()
def init_weights(lm: ZonosLM, seed: int) -> None:
    """The shared deterministic init (unit-scale: a random model's output depends on its prompt), plus what it
    does not know: LayerNorms at identity, the Fourier features N(0, 1) as the reference draws them, and the
    learned unconditional vectors N(0, 1) (so guidance has something to push against)."""
    init_random_weights(lm, seed)
    generator = torch.Generator(device=lm.device).manual_seed(seed + 1)
    for module in lm.modules():
        if isinstance(module, nn.LayerNorm):
            module.weight.fill_(1.0)
            module.bias.zero_()
        if isinstance(module, FourierConditioner):
            module.weight.normal_(generator=generator)
        if getattr(module, "uncond_vector", None) is not None:
            module.uncond_vector.normal_(generator=generator)
