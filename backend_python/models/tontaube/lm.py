"""`TontaubeLM`: TontaubeV1's semantic model (codebook 0) in the LM lane, one semantic code a step (K = 1).

Its prefill is the reference's semantic request for a text: the voice prompt's semantic row (up to 750 frames),
the system tag and the text one id a character, `PAD`, then the reference's forced first code (silence, 3716:
in the prompt, not in the output). The prefill runs at the front-prompt scheme's positions (positions.py); every
decoded code continues linearly (its place + 25, as the reference's decode). It writes codes until end of speech
(at least 13, as the reference asks), the reference's logit biases folded into its head's bias (end of speech
-0.8, its silence codes -0.2). The audio marker is never sampled: a request is one segment (the reference's
single-segment request feeds a marker back and re-prefills at realigned positions; a whole text is read as one
segment here, which for texts of up to 350 characters is what the reference does).

Each chunk of its codes goes to the refinement lane with the stream's `refine_context` (the refiners' text and
the voice prompt's rows), then to the codec lanes as whole frames.
"""
from __future__ import annotations

from pathlib import Path

import torch

from ..base import Prompt
from ..layers.decoder import KVCache
from ..layers.empty_weights import empty_weights
from ..layers.random_init import init_random_weights
from ..slots import SlotLayout
from ..speech_token_lm import SpeechVocab, TokenStepLM
from . import checkpoint
from .cascade import VoicePrompt, semantic_sequence
from .config import CHUNK_REALIGN_OFFSET, SEMANTIC_CODES, TontaubeConfig, head_size
from .positions import rope_positions
from .predictor import AudioTokenHead, Backbone
from .refine_context import encode_refine_context
from .text import TextTokenizer, system_tag, window

SILENCE_CODE = 3716  # the reference's forced first semantic code
MIN_CODES = 13
EOS_BIAS, SILENCE_BIAS = -0.8, -0.2
SILENCE_CODES = (3716, 12725, 3974, 4299, 10309, 5995, 6144, 15170, 13601, 398,  # collapse attractors
                 7362, 17, 3710, 1531, 1384, 12293, 5169, 4544)  # ordinary pauses
BIAS_STD = 0.1


class TontaubeLM(TokenStepLM):
    def __init__(self, config: TontaubeConfig, tokenizer: TextTokenizer, voices: dict[str, VoicePrompt]) -> None:
        super().__init__()
        p = config.predictors[0]
        self.config, self.text, self.voice_prompts = config, tokenizer, voices
        self.model = Backbone(p)
        self.audio_head = AudioTokenHead(p.hidden_size, p.audio_head_hidden, head_size(0))
        # the head's columns: the codes, then end of speech (the fed-back ids are the vocabulary's: `step_ids`)
        self.vocab = SpeechVocab(num_codes=SEMANTIC_CODES, eos=SEMANTIC_CODES, num_embeddings=head_size(0),
                                 num_head_rows=head_size(0))

    # ---- building ------------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, path: str | Path, device="cpu", dtype: torch.dtype = torch.float32) -> "TontaubeLM":
        from tokenizers import Tokenizer
        path = Path(path)
        config = checkpoint.read_config(path)
        tokenizer = TextTokenizer(Tokenizer.from_file(str(path / checkpoint.FOLDERS[0] / checkpoint.TOKENIZER_FILE)))
        voices = {name: VoicePrompt(tuple(tuple(r) for r in rows.tolist()))
                  for name, rows in checkpoint.read_voices(path).items()}
        with empty_weights():
            lm = cls(config, tokenizer, voices)
        lm.load_state_dict(checkpoint.read_weights(path, 0), strict=True, assign=True)
        return lm.with_reference_biases().to(device=device, dtype=dtype).eval()

    @classmethod
    def from_config(cls, config: TontaubeConfig, tokenizer: TextTokenizer, voices: dict[str, VoicePrompt],
                    device="cpu", dtype: torch.dtype = torch.float32, seed: int = 0) -> "TontaubeLM":
        with empty_weights():
            lm = cls(config, tokenizer, voices).to(dtype=dtype)
        lm.to_empty(device=device)
        lm.init_weights(seed)
        return lm.with_reference_biases().eval()

    def init_weights(self, seed: int) -> None:
        init_random_weights(self, seed)
        generator = torch.Generator(device=self.device).manual_seed(seed + 1)
        with torch.no_grad():
            for linear in (self.audio_head.fc1, self.audio_head.fc2):
                linear.bias.normal_(0.0, BIAS_STD, generator=generator)

    @torch.no_grad()
    def with_reference_biases(self) -> "TontaubeLM":
        """The reference samples with logit biases (end of speech -0.8, silence codes -0.2): a constant added to
        a logit is a constant added to its head row's bias."""
        self.audio_head.fc2.bias[SEMANTIC_CODES] += EOS_BIAS
        self.audio_head.fc2.bias[list(SILENCE_CODES)] += SILENCE_BIAS
        return self

    # ---- SpeechLM --------------------------------------------------------------------------------
    @property
    def frame_rate(self) -> float:
        return self.config.frame_rate

    @property
    def voices(self) -> tuple[str, ...]:
        return tuple(self.voice_prompts)

    @property
    def device(self) -> torch.device:
        return self.model.embed_tokens.weight.device

    @property
    def hidden_size(self) -> int:
        return self.config.predictors[0].hidden_size

    supports_reference = True  # a reference's codes (TontaubeVoiceEncoder) are the voice prompt

    def encode_prompt(self, text: str, voice: str | None, reference=None) -> Prompt:
        prompt = self._reference_voice(reference) if reference is not None else self._voice(voice)
        tag = system_tag()
        semantic_text = self.text.ids(window([text], 0, with_neighbours=True, tag=tag))
        ids = semantic_sequence(self.config.ids, prompt, self.config.prompt_caps[0], semantic_text,
                                forced=[SILENCE_CODE])
        refine_text = self.text.ids(window([text], 0, with_neighbours=False, tag=tag))
        context = torch.from_numpy(encode_refine_context(refine_text, prompt, max(self.config.prompt_caps[1:])))
        return Prompt(num_tokens=len(ids), tensors={"ids": torch.tensor(ids), "refine_context": context})

    def _reference_voice(self, reference) -> VoicePrompt:
        """A cloned voice: its reference's codes [frames, 4] (up to 750: 60 s), as the voice prompt's rows."""
        codes = reference.tensors.get("ref_codes")
        if codes is None or codes.dim() != 2 or codes.shape[1] != 4 or codes.shape[0] < 1:
            raise ValueError("TontaubeV1 clones a voice from its reference's codes: a 'ref_codes' of [frames, 4]")
        rows = codes[:self.config.prompt_caps[0]].T.tolist()
        return VoicePrompt(tuple(tuple(int(c) for c in row) for row in rows))

    def _voice(self, voice: str | None) -> VoicePrompt | None:
        if voice is None:
            return next(iter(self.voice_prompts.values()), None)
        if voice not in self.voice_prompts:
            raise ValueError(f"unknown voice {voice!r}; known voices: {list(self.voice_prompts)}")
        return self.voice_prompts[voice]

    def refine_context(self, prompt: Prompt) -> torch.Tensor | None:
        return prompt.tensors["refine_context"]

    def frame_limits(self, prompt: Prompt) -> tuple[int, int | None]:
        return MIN_CODES, None

    def prompt_embeddings(self, prompt: Prompt) -> torch.Tensor:
        return self.model.embed_tokens(prompt.tensors["ids"].to(self.device))

    # ---- TokenStepLM hooks ---------------------------------------------------------------------
    def step_ids(self, tokens: torch.Tensor) -> torch.Tensor:
        ids = self.config.ids
        return torch.where(tokens == SEMANTIC_CODES, ids.eos, ids.dc_base + tokens)

    def embed_step_ids(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model.embed_tokens(ids)

    def head_logits(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.audio_head(hidden).float()
        return logits[:, :SEMANTIC_CODES], logits[:, SEMANTIC_CODES:SEMANTIC_CODES + 1]

    def allocate_kv(self, num_rows: int, layout: SlotLayout) -> KVCache:
        p = self.config.predictors[0]
        return KVCache.allocate(p.num_hidden_layers, num_rows, p.num_key_value_heads, layout.max_seq_len, p.head_dim,
                                self.device, self.model.embed_tokens.weight.dtype, layout.kv_positions)

    def hidden_states(self, embeds: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor,
                      cache: KVCache) -> torch.Tensor:
        """Decoded tokens: RoPE at their place + 25 (the reference's decode), clamped to its table."""
        top = self.config.predictors[0].max_position_embeddings - 1
        return self.model.run(embeds, rows, positions, (positions + CHUNK_REALIGN_OFFSET).clamp(max=top), cache)

    def prefill_hidden(self, prompt: Prompt, embeds, rows, positions, cache) -> torch.Tensor:
        p = self.config.predictors[0]
        scheme = rope_positions(prompt.tensors["ids"].tolist(), self.config.ids, 0, p.max_position_embeddings)
        return self.model.run(embeds, rows, positions, torch.tensor([scheme.prefill], device=self.device), cache)

    def _fuse_projections(self) -> None:
        self.model.fuse_projections()
