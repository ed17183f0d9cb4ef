"""`VoxtralLM`: Voxtral-TTS behind the `SpeechLM` interface, one frame of 37 codes per step.

A step is the frame's head, then one backbone token (graphs/frame.py's two stages):
- *predict*: from each row's stored hidden state (the backbone's final-normed state at its last position), the
  flow head (flow_head.py) gives the semantic code (sampled with the request's settings over the semantic head;
  END_AUDIO ends the stream) and the 36 acoustic codes (the flow from the row's Gaussian noise, guided, then
  FSQ). The frame's embedding is the sum of its 37 codes' rows of the audio embedding (codebook c's ids shifted
  by the two specials and by the sizes of the codebooks before it), as the reference's `MultiVocabEmbeddings`.
- *talk*: one backbone token on that embedding; its hidden state is the next frame's condition.

Codes leave the model unshifted ([0, 8192) and [0, 21)), with -1 in codebook 0 where the row ended. The noise
of a frame is one row of Exp(1) draws per stream from its own generator, greedy streams included (the flow
needs it whatever the sampling): the semantic code's sampling noise, then the flow's starting point.

Unlike the references: the semantic code is sampled with the request's settings (the reference's argmax is
temperature 0), no repetition penalty (the reference's acts on text logits it never reads), no voice cloning
from audio (the public checkpoint ships no codec encoder).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ..base import DecodeBatch, Prompt, VoiceReference, to_device
from ..graphs.frame import FrameGraphs, FrameInputs, TwoStageFrameLM
from ..layers.compile import compile_hot_path
from ..layers.decoder import DecoderStack, KVCache, Step
from ..layers.empty_weights import empty_weights
from ..layers.random_init import init_random_weights
from ..layers.sampling import TINY, sample
from ..slots import SlotLayout, SlotSpeechLM, SlotState
from . import checkpoint
from .config import END_AUDIO, NUM_AUDIO_SPECIALS, VoxtralConfig
from .flow_head import FlowHead, gaussian_from_exponential
from .prompt import build_prompt, resolve_voice
from .tokenizer import ByteTekken, load_tokenizer


@dataclass
class SlotMemory:
    """Device tensors for all slots (row s = slot s) plus one scratch row, the last, for padding rows."""

    kv: KVCache
    hidden: torch.Tensor  # [slots, dim], each row's last hidden state: the next frame's condition
    offsets: torch.Tensor  # [37] int64, each codebook's first id in the audio embedding
    no_text: torch.Tensor  # [dim] zeros (FrameInputs.text_embed: nothing rides along)

    @property
    def scratch_row(self) -> int:
        return self.hidden.shape[0] - 1


class Backbone(DecoderStack):
    """The Mistral decoder: a Llama-shaped stack (no q/k norm) with its token embedding."""

    def __init__(self, config: VoxtralConfig) -> None:
        b = config.backbone
        super().__init__(b.n_layers, b.dim, b.hidden_dim, b.n_heads, b.n_kv_heads, b.head_dim, b.norm_eps)
        self.embed_tokens = nn.Embedding(b.vocab_size, b.dim)
        for layer in self.layers:
            layer.self_attn.q_norm, layer.self_attn.k_norm = nn.Identity(), nn.Identity()
        self.backbone = b

    def run(self, embeds: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor, cache: KVCache,
            compiled: bool = False) -> torch.Tensor:
        """embeds [B, T, D], rows [B], positions [B, T] -> the last hidden state [B, D] (normed). `compiled`: the
        decode frame's compiled layers, where `_compile` made them (prefill's many shapes keep the plain ones)."""
        step = Step.build(rows, positions, self.backbone.head_dim, self.backbone.rope_theta, cache, embeds.dtype)
        return self(embeds, step, cache, compiled=compiled)[:, -1]


class VoxtralLM(TwoStageFrameLM, SlotSpeechLM):
    frame_noise_every_row = True  # the flow starts from noise whatever the sampling

    def __init__(self, config: VoxtralConfig, tokenizer, voice_embeddings: dict[str, torch.Tensor]) -> None:
        super().__init__()
        self.config, self.tokenizer = config, tokenizer
        self.model = Backbone(config)
        self.audio_embeddings = nn.Embedding(config.audio_embedding_rows, config.backbone.dim)
        self.acoustic_transformer = FlowHead(config.flow, config.semantic_head_size, config.semantic_codebook_size,
                                             config.n_acoustic_codebook, config.acoustic_codebook_size)
        self.voice_embeddings = voice_embeddings  # preset voice -> [N, dim] rows, on the model's device

    # ---- loading -------------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, path: str | Path, device: str | torch.device = "cpu",
                        dtype: torch.dtype = torch.float32) -> "VoxtralLM":
        config = checkpoint.read_config(path)
        with empty_weights():
            lm = cls(config, load_tokenizer(path), {})
        state = checkpoint.lm_state(checkpoint.read_tensors(path), config)
        lm.load_state_dict(state, strict=True, assign=True)
        lm.acoustic_transformer.reset_time_table()
        lm = lm.to(device=device, dtype=dtype)
        lm.voice_embeddings = {k: v.to(device=device, dtype=dtype)
                               for k, v in checkpoint.read_voices(path, config.voices).items()}
        return lm.eval()

    @classmethod
    def from_config(cls, config: VoxtralConfig, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
                    seed: int = 0, voice_frames: int = 8) -> "VoxtralLM":
        """Random weights (the audio embedding scaled so a frame's 37 rows sum to unit scale), random preset
        voices of `voice_frames` rows; the tiny Tekken (bytes, no merges)."""
        lm = cls(config, ByteTekken(), {}).to(device=device, dtype=dtype)
        init_random_weights(lm, seed)
        generator = torch.Generator().manual_seed(seed + 1)
        with torch.no_grad():
            lm.audio_embeddings.weight.mul_(config.num_codebooks ** -0.5)
            lm.voice_embeddings = {name: torch.randn(voice_frames, config.backbone.dim, generator=generator).to(
                device=device, dtype=dtype) for name in config.voices}
        return lm.eval()

    # ---- SpeechLM properties -------------------------------------------------------------------
    @property
    def num_codebooks(self) -> int:
        return self.config.num_codebooks

    @property
    def frame_rate(self) -> float:
        return self.config.frame_rate

    @property
    def voices(self) -> tuple[str, ...]:
        return self.config.voices

    @property
    def device(self) -> torch.device:
        return self.audio_embeddings.weight.device

    languages = ("english", "french", "spanish", "german", "italian", "portuguese", "dutch", "arabic", "hindi")

    def encode_prompt(self, text: str, voice: str | None, reference: VoiceReference | None = None) -> Prompt:
        self.check_no_reference(reference)
        name = resolve_voice(self.voices, voice)
        return build_prompt(self.config, self.tokenizer, text, self.voices.index(name),
                            self.voice_embeddings[name].shape[0])

    # ---- memory and graphs ---------------------------------------------------------------------
    def _fuse_projections(self) -> None:
        self.model.fuse_projections()

    def _compile(self) -> None:
        """Inductor fuses each backbone layer and the flow head's whole guided flow (its Euler steps unrolled,
        one graph per batch bucket) for the decode frame; the frame graphs then capture the compiled kernels
        (compiling happens in their warm-up runs)."""
        compile_hot_path((self.model,))
        head = self.acoustic_transformer
        head.acoustic_values = torch.compile(head.acoustic_values, fullgraph=True)

    def _allocate_memory(self, layout: SlotLayout) -> SlotMemory:
        c, b, device = self.config, self.config.backbone, self.device
        dtype, num_rows = self.audio_embeddings.weight.dtype, layout.num_slots + 1
        kv = KVCache.allocate(b.n_layers, num_rows, b.n_kv_heads, layout.max_seq_len, b.head_dim, device, dtype,
                              layout.kv_positions)
        sizes = torch.tensor((0,) + c.codebook_sizes[:-1])
        return SlotMemory(kv=kv, hidden=torch.zeros(num_rows, b.dim, device=device, dtype=dtype),
                          offsets=(sizes.cumsum(0) + NUM_AUDIO_SPECIALS).to(device),
                          no_text=torch.zeros(b.dim, device=device, dtype=dtype))

    def _build_graphs(self, layout: SlotLayout) -> FrameGraphs:
        return self._two_stage_graphs(layout, self.config.backbone.dim, self._require_memory().no_text.dtype)

    @property
    def noise_width(self) -> int:
        """Exp(1) draws per row and frame: one per semantic id, then one per acoustic value (made Gaussian)."""
        return self.config.semantic_head_size + self.config.n_acoustic_codebook

    # ---- phases --------------------------------------------------------------------------------
    @torch.no_grad()
    def prefill(self, slot: int, prompt: Prompt) -> None:
        mem = self._require_memory()
        if prompt.num_tokens > mem.kv.max_seq_len:
            raise ValueError(f"prompt of {prompt.num_tokens} tokens exceeds max_seq_len {mem.kv.max_seq_len}")
        embeds = self.prompt_embeds(prompt)[None]
        rows = to_device([slot], self.device)
        positions = torch.arange(embeds.shape[1], device=self.device)[None]
        mem.hidden[slot] = self.model.run(embeds, rows, positions, mem.kv)[0]
        self._states[slot] = SlotState(position=embeds.shape[1])

    def prompt_embeds(self, prompt: Prompt) -> torch.Tensor:
        """[L, D]: the token embeddings, the voice's rows at the [AUDIO] positions."""
        ids = prompt.tensors["ids"].to(self.device)
        embeds = self.model.embed_tokens(ids)
        voice = self.voice_embeddings[self.voices[int(prompt.tensors["voice"][0])]]
        return embeds.masked_scatter((ids == self.config.audio_token_id)[:, None], voice.to(embeds.dtype))

    def embed_frame(self, codes: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        """codes [B, 37] unshifted (an ended row's -1 reads EMPTY's neighbour, never used) -> [B, D]."""
        return self.audio_embeddings((codes + offsets).clamp_min(0)).sum(dim=-2)

    @torch.no_grad()
    def decode(self, batch: DecodeBatch) -> tuple[torch.Tensor, torch.Tensor]:
        mem, states = self._require_memory(), [self._live_state(slot) for slot in batch.slots]
        codes = self._two_stage_frame(batch, [[slot, s.position, int(ignore)] for slot, s, ignore
                                              in zip(batch.slots, states, batch.ignore_eos)], [mem.no_text] * len(states))
        for s in states:
            s.position += 1
        return codes, codes[:, 0] < 0

    def _predict(self, inputs: FrameInputs) -> tuple[torch.Tensor, torch.Tensor]:
        """Each row's frame from its stored hidden state -> (codes [B, 37] int64, frame embedding [B, D])."""
        mem, c, head = self._require_memory(), self.config, self.acoustic_transformer
        hidden = mem.hidden[inputs.rows]
        width = c.semantic_head_size
        logits = head.semantic_logits(hidden, inputs.is_eos_blocked)
        semantic = sample(logits, inputs.sampling, inputs.noise[:, :width].clamp_min(TINY))
        values = head.acoustic_values(hidden, gaussian_from_exponential(inputs.noise[:, width:]))
        acoustic = head.quantize(values)
        ended = semantic == END_AUDIO
        codes = torch.cat(((semantic - NUM_AUDIO_SPECIALS).masked_fill(ended, -1)[:, None], acoustic), dim=1)
        return codes, self.embed_frame(codes, mem.offsets)

    def _talk(self, inputs: FrameInputs, frame_embed: torch.Tensor) -> None:
        mem, rows = self._require_memory(), inputs.rows
        hidden = self.model.run(frame_embed[:, None].to(mem.no_text.dtype), rows, inputs.positions[:, None], mem.kv,
                                compiled=True)
        mem.hidden[rows] = hidden
