"""`TSELM`: streaming target-speaker extraction as an interleaved LM: it listens while it speaks.

One sequence per stream, laid out as the paper's chunk-wise interleaved splicing:

    [BOS] [speaker] [input chunk 0: N frames] [output chunk 0: N frames] [input chunk 1] [output chunk 1] …

The speaker position is the enrollment embedding (an x-vector of the codec model's speaker encoder) through
`speaker_projection`. An input frame is embedded as the sum of its K codes' rows of `input_embeddings`, an output
frame of `output_embeddings` (the two directions have their own tables); the output chunk after input chunk c has
as many frames as it (the target speaker's speech over the same span), each frame's K codes sampled at once from
`audio_head` (K × V logits, no delays). A chunk's first output frame reads the hidden state after its last input
frame: the model writes chunk c once input chunk c has come, and waits, keeping its row, while it has not
(`is_waiting_for_input`); the stream ends when its output has caught up with a closed input. Input is read in
chunks of `chunk_frames` whatever the pieces it came in (models/input_feed.py), so a stream's output does not
depend on how its client cut the audio.

A chunk's input is read by one backbone call over its N positions before the step that needs it (eager, as a
prefill is; the rows that read a whole chunk in the same step share one call), the output frames by the two-stage
frame (graphs/frame.py: sample, then one backbone token).

What follows the paper and what does not: the interleaved splicing, the enrollment condition and the per-chunk
wait are its design; its seam refinement (each chunk's start re-predicted from the history) is left to the
codec's left context; no weights exist (the paper has no public code or weights), so the random presets are a
serving shape whose quality is not reproduced.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ..base import DecodeBatch, Prompt, VoiceReference, to_device
from ..graphs.frame import FrameGraphs, FrameInputs, TwoStageFrameLM
from ..input_feed import InputFeed
from ..layers.decoder import DecoderStack, KVCache, Step
from ..layers.empty_weights import empty_weights
from ..layers.random_init import init_random_weights
from ..layers.sampling import TINY, sample
from ..slots import SlotLayout, SlotSpeechLM
from .config import BOS, NUM_SPECIAL_IDS, SPEAKER, TSEConfig

SPEAKER_EMBEDDING = "speaker_embedding"  # a VoiceReference's x-vector (the enrollment)


@dataclass
class SlotMemory:
    kv: KVCache
    logits: torch.Tensor  # [slots, K, V] float32, the next output frame's
    no_text: torch.Tensor  # [hidden] zeros (FrameInputs.text_embed: nothing rides along)

    @property
    def scratch_row(self) -> int:
        return self.logits.shape[0] - 1


@dataclass
class TSESlotState:
    position: int  # the next KV position
    feed: InputFeed
    read: int = 0  # input frames read
    written: int = 0  # output frames written

    @property
    def has_caught_up(self) -> bool:
        return self.written >= self.read


class Backbone(DecoderStack):
    def __init__(self, config: TSEConfig) -> None:
        b = config.backbone
        super().__init__(b.num_hidden_layers, b.hidden_size, b.intermediate_size, b.num_attention_heads,
                         b.num_key_value_heads, b.head_dim, b.rms_norm_eps)
        self.embed_tokens = nn.Embedding(NUM_SPECIAL_IDS, b.hidden_size)
        self.backbone = b

    def run(self, embeds: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """embeds [B, T, H] -> the last hidden state [B, H] (normed)."""
        step = Step.build(rows, positions, self.backbone.head_dim, self.backbone.rope_theta, cache, embeds.dtype)
        return self(embeds, step, cache, compiled=False)[:, -1]


class TSELM(TwoStageFrameLM, SlotSpeechLM):
    takes_input = True

    def __init__(self, config: TSEConfig) -> None:
        super().__init__()
        c, hidden = config, config.backbone.hidden_size
        self.config = config
        self.input_chunk_frames = c.chunk_frames
        self.model = Backbone(config)
        self.speaker_projection = nn.Linear(c.speaker_dim, hidden, bias=False)
        self.input_embeddings = nn.Embedding(c.num_codebooks * c.codebook_size, hidden)
        self.output_embeddings = nn.Embedding(c.num_codebooks * c.codebook_size, hidden)
        self.audio_head = nn.Linear(hidden, c.num_codebooks * c.codebook_size, bias=False)

    @classmethod
    def from_config(cls, config: TSEConfig, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
                    seed: int = 0) -> "TSELM":
        """Random weights; a frame's K rows of either table sum to unit scale."""
        lm = cls(config).to(device=device, dtype=dtype)
        init_random_weights(lm, seed)
        with torch.no_grad():
            lm.input_embeddings.weight.mul_(config.num_codebooks ** -0.5)
            lm.output_embeddings.weight.mul_(config.num_codebooks ** -0.5)
        return lm.eval()

    @classmethod
    def from_pretrained(cls, path: str | Path, device: str | torch.device = "cpu",
                        dtype: torch.dtype = torch.float32) -> "TSELM":
        from safetensors.torch import load_file

        config = TSEConfig.from_dir(path)
        with empty_weights():
            lm = cls(config)
        lm.load_state_dict(load_file(str(Path(path) / "model.safetensors")), strict=True, assign=True)
        return lm.to(device=device, dtype=dtype).eval()

    # ---- SpeechLM properties -------------------------------------------------------------------
    @property
    def num_codebooks(self) -> int:
        return self.config.num_codebooks

    @property
    def frame_rate(self) -> float:
        return self.config.frame_rate

    @property
    def voices(self) -> tuple[str, ...]:
        return ()

    supports_reference = True

    def encode_prompt(self, text: str, voice: str | None, reference: VoiceReference | None = None) -> Prompt:
        raise ValueError("a target-speaker extraction model takes streamed input audio and an enrollment clip, "
                         "not text")

    def open_input(self, reference: VoiceReference) -> Prompt:
        """The prompt of a stream whose input frames come later (appended to its `input`): the enrollment's
        x-vector in `reference.tensors["speaker_embedding"]`."""
        embedding = reference.tensors.get(SPEAKER_EMBEDDING) if reference is not None else None
        if embedding is None or tuple(embedding.shape) != (self.config.speaker_dim,):
            raise ValueError(f"target-speaker extraction needs an enrollment: a {SPEAKER_EMBEDDING!r} of "
                             f"[{self.config.speaker_dim}]")
        return Prompt(num_tokens=2, tensors={"ids": torch.tensor([BOS, SPEAKER]), "speaker": embedding.float()},
                      input=InputFeed(self.config.num_codebooks, self.config.codebook_size))

    def kv_positions_for(self, num_prompt_tokens: int, num_frames: int) -> int:
        """The prompt, the output frames, and the input they answer (read a chunk ahead at most)."""
        return num_prompt_tokens + 2 * num_frames + self.config.chunk_frames + 1

    def is_waiting_for_input(self, slot: int) -> bool:
        state = self._states.get(slot)
        if state is None or not state.has_caught_up:
            return False
        return not (state.feed.is_closed or state.feed.num_frames - state.read >= self.config.chunk_frames)

    # ---- memory and graphs ---------------------------------------------------------------------
    def _fuse_projections(self) -> None:
        self.model.fuse_projections()

    def _allocate_memory(self, layout: SlotLayout) -> SlotMemory:
        c, b, device = self.config, self.config.backbone, self.device
        dtype, num_rows = self.audio_head.weight.dtype, layout.num_slots + 1
        kv = KVCache.allocate(b.num_hidden_layers, num_rows, b.num_key_value_heads, layout.max_seq_len, b.head_dim,
                              device, dtype, layout.kv_positions)
        return SlotMemory(kv=kv, logits=torch.zeros(num_rows, c.num_codebooks, c.codebook_size, device=device),
                          no_text=torch.zeros(b.hidden_size, device=device, dtype=dtype))

    def _build_graphs(self, layout: SlotLayout) -> FrameGraphs:
        return self._two_stage_graphs(layout, self.config.backbone.hidden_size,
                                      self._require_memory().no_text.dtype)

    @property
    def noise_width(self) -> int:
        return self.config.num_codebooks * self.config.codebook_size

    # ---- phases --------------------------------------------------------------------------------
    @torch.no_grad()
    def prefill(self, slot: int, prompt: Prompt) -> None:
        mem = self._require_memory()
        if prompt.input is None:
            raise ValueError("a tse prompt holds its input (open_input)")
        ids = prompt.tensors["ids"].to(self.device)
        embeds = self.model.embed_tokens(ids)
        speaker = self.speaker_projection(prompt.tensors["speaker"].to(self.device, embeds.dtype))
        embeds = torch.cat((embeds[:1], speaker[None]))[None]
        self.model.run(embeds, to_device([slot], self.device), torch.arange(2, device=self.device)[None], mem.kv)
        self._states[slot] = TSESlotState(position=2, feed=prompt.input)

    def _read_all(self, reading: list[tuple[int, TSESlotState]]) -> None:
        """The next input chunk of each row in `reading` into the backbone: the rows with a whole chunk in one
        call, a closed input's last, shorter chunk alone; each row's last hidden state gives its chunk's first
        output frame."""
        n = self.config.chunk_frames
        whole = [(slot, state) for slot, state in reading if state.feed.num_frames - state.read >= n]
        if whole:
            self._read([slot for slot, _ in whole], [state for _, state in whole], n)
        whole_slots = {slot for slot, _ in whole}
        for slot, state in reading:
            if slot not in whole_slots:
                self._read([slot], [state], state.feed.num_frames - state.read)

    def _read(self, slots: list[int], states: list[TSESlotState], num_frames: int) -> None:
        mem = self._require_memory()
        for slot, state in zip(slots, states):
            capacity = min(self._extent_lengths.get(slot, mem.kv.max_seq_len), mem.kv.max_seq_len)
            if state.position + num_frames + 1 > capacity:
                raise ValueError(f"slot {slot} is full ({state.position} positions): its input outran its KV extent")
        frames = torch.stack([s.feed.frames(s.read, s.read + num_frames) for s in states]).to(self.device)
        embeds = self.embed_frames(self.input_embeddings, frames)  # [B, N, H]
        positions = torch.stack([torch.arange(s.position, s.position + num_frames) for s in states]).to(self.device)
        hidden = self.model.run(embeds, to_device(slots, self.device), positions, mem.kv)  # [B, H]
        mem.logits[to_device(slots, self.device)] = self.audio_logits(hidden)
        for state in states:
            state.position += num_frames
            state.read += num_frames

    def embed_frames(self, table: nn.Embedding, frames: torch.Tensor) -> torch.Tensor:
        """frames [..., K] codes -> [..., H]: the sum of each code's row (codebook j's ids shifted by j × V)."""
        shift = torch.arange(frames.shape[-1], device=frames.device) * self.config.codebook_size
        return table(frames + shift).sum(dim=-2)

    def audio_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        c = self.config
        return self.audio_head(hidden).view(-1, c.num_codebooks, c.codebook_size).float()

    @torch.no_grad()
    def decode(self, batch: DecodeBatch) -> tuple[torch.Tensor, torch.Tensor]:
        mem = self._require_memory()
        states = [self._live_state(slot) for slot in batch.slots]
        self._read_all([(slot, state) for slot, state in zip(batch.slots, states)
                        if state.has_caught_up and state.read < state.feed.num_frames
                        and not self.is_waiting_for_input(slot)])
        ended = torch.tensor([s.has_caught_up for s in states])  # caught up with a closed input: the end
        codes = self._two_stage_frame(batch, [[slot, s.position, 1] for slot, s in zip(batch.slots, states)],
                                      [mem.no_text] * len(states))
        for state, is_end in zip(states, ended.tolist()):
            if not is_end:
                state.written += 1
                state.position += 1
        return codes, ended.to(codes.device)

    def _predict(self, inputs: FrameInputs) -> tuple[torch.Tensor, torch.Tensor]:
        mem, c = self._require_memory(), self.config
        logits = mem.logits[inputs.rows]
        noise = inputs.noise.clamp_min(TINY).view(-1, c.codebook_size)
        sampled = sample(logits.flatten(0, 1), inputs.sampling.repeat_rows(c.num_codebooks), noise)
        codes = sampled.view(-1, c.num_codebooks)
        return codes, self.embed_frames(self.output_embeddings, codes)

    def _talk(self, inputs: FrameInputs, frame_embed: torch.Tensor) -> None:
        mem, rows = self._require_memory(), inputs.rows
        hidden = self.model.run(frame_embed[:, None].to(mem.no_text.dtype), rows, inputs.positions[:, None], mem.kv)
        mem.logits[rows] = self.audio_logits(hidden)
