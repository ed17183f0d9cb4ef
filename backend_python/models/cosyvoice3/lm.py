"""`CosyVoice3LM`: CosyVoice 3's speech LM behind the `SpeechLM` interface, one 25 Hz speech token per decode step.

The backbone, the slots, sampling, the CUDA graphs and the hidden-state hook are `SpeechTokenLM`'s
(models/speech_token_lm.py); this class adds what is CosyVoice 3's own: the prompt (prompt.py: sos and task_id
from the speech table around the text, with its `<|endofprompt|>` instruct), the speech ids (config.py: eos
6562 among 200 special ids), the frame limits (end of speech blocked before 2 tokens per text token and
forced after 20, as the reference's min/max_token_text_ratio), and the voices: a preset voice or a reference's
x-vector picks the 192-d speaker embedding the codec is conditioned on (`codec_condition`), never the LM input.

A family built on this LM (FlashTTS: CosyVoice 2's LM with multi-token-prediction heads) may not import this
family (tests/unit/test_import_graph.py): it subclasses `SpeechTokenLM` instead, whose hook is documented there.
"""
from __future__ import annotations

from pathlib import Path

import torch

from protocol.quoting import quoted

from ..base import Prompt, TextFeed, VoiceReference
from ..speech_token_lm import SpeechTokenLM
from ..text_segments import SegmentContext, SegmentedText
from . import checkpoint
from .config import CosyVoice3Config
from .presets import build_tiny_tokenizer
from .prompt import (NUM_TEXT_TOKENS, PROMPT_SPEECH, SPEAKER_EMBEDDING, TEXT_IDS, make_prompt, with_instruct)

REF_CODES = "ref_codes"  # an in-context reference's codes (VoiceReference.tensors), which we cannot use
MAX_CONTEXT_FRAMES = 250  # a streamed text's earlier segment continues into the next only up to 10 s of speech


class CosyVoice3LM(SpeechTokenLM):
    """Parameters carry the official llm.pt names (`llm.model.model.*`, `speech_embedding`, `llm_decoder`)."""

    supports_reference = True

    def __init__(self, config: CosyVoice3Config, tokenizer, voices: dict[str, torch.Tensor] | None = None) -> None:
        super().__init__(config.llm, config.speech_vocab, tokenizer)
        self.config = config
        self.voice_embeddings = _check_voices(config, voices or {})  # name -> [192] float32, on the CPU

    # ---- loading -------------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, path: str | Path, device: str | torch.device = "cpu",
                        dtype: torch.dtype = torch.float32) -> "CosyVoice3LM":
        """Our checkpoint directory or an official one (see checkpoint.py)."""
        return cls.build_loaded(checkpoint.read_config(path), checkpoint.load_tokenizer(path),
                                checkpoint.read_voices(path), checkpoint.read_state_dict(path), device, dtype)

    @classmethod
    def from_config(cls, config: CosyVoice3Config, device: str | torch.device = "cpu",
                    dtype: torch.dtype = torch.float32, seed: int = 0, tokenizer=None) -> "CosyVoice3LM":
        """Random weights and random preset voices (built on `meta`, materialised on `device`); the tokenizer
        defaults to the tiny BPE."""
        tokenizer = tokenizer if tokenizer is not None else build_tiny_tokenizer()
        return cls.build_random(config, tokenizer, random_voices(config, seed), device, dtype, seed)

    # ---- prompts -------------------------------------------------------------------------------
    def encode_prompt(self, text: str, voice: str | None, reference: VoiceReference | None = None) -> Prompt:
        """voice None -> the first preset voice (none: the codec's default speaker); a reference's speaker
        embedding replaces a preset voice (x-vector cloning)."""
        return make_prompt(self._text_ids(text), self._speaker_embedding(voice, reference))

    def encode_segment(self, text: str, voice: str | None, context: SegmentContext | None,
                       reference: VoiceReference | None = None) -> Prompt:
        """A segment of a streamed text; the segment before it (up to MAX_CONTEXT_FRAMES of its speech) is the
        prompt text and prompt speech the LM continues, as in the reference's zero-shot mode."""
        speaker = self._speaker_embedding(voice, reference)
        if context is None or not 0 < context.frames.shape[0] <= MAX_CONTEXT_FRAMES:
            return make_prompt(self._text_ids(text), speaker)
        return make_prompt(self._text_ids(text, with_prefix=False), speaker, self._text_ids(context.text),
                           context.frames[:, 0])

    def open_text(self, voice: str | None, reference: VoiceReference | None = None) -> TextFeed:
        """A streamed text, spoken segment by segment (its prompt needs the whole text between sos and task_id);
        the voice and the reference are refused now, not at the first segment."""
        self._speaker_embedding(voice, reference)
        return SegmentedText(lambda text, context: self.encode_segment(text, voice, context, reference),
                             self.frame_rate)

    def codec_condition(self, prompt: Prompt) -> torch.Tensor | None:
        """The stream's speaker embedding [192] float32 (a preset voice's or the reference's), for the flow decoder."""
        return prompt.tensors.get(SPEAKER_EMBEDDING)

    def prompt_embeddings(self, prompt: Prompt) -> torch.Tensor:
        """[sos, text, task_id, prompt speech] embeddings [L, hidden]: sos and task_id are speech-table rows."""
        device, cfg = self.device, self.config
        sos, task_id = self.speech_embedding(torch.tensor([cfg.sos, cfg.task_id], device=device))
        text = self.backbone.embed_text(prompt.tensors[TEXT_IDS].to(device))
        speech = self.speech_embedding(prompt.tensors[PROMPT_SPEECH].to(device))
        return torch.cat((sos[None], text, task_id[None], speech))

    def frame_limits(self, prompt: Prompt) -> tuple[int, int | None]:
        return self.config.frame_limits(int(prompt.tensors[NUM_TEXT_TOKENS]))

    # ---- helpers -------------------------------------------------------------------------------
    def _text_ids(self, text: str, with_prefix: bool = True) -> list[int]:
        if not text.strip():
            raise ValueError("text must not be empty")
        return list(self.tokenizer(with_instruct(text) if with_prefix else text)["input_ids"])

    def _speaker_embedding(self, voice: str | None, reference: VoiceReference | None) -> torch.Tensor | None:
        """The codec's speaker embedding [192]: the reference's, the named voice's, or the first voice's."""
        if reference is not None:
            if voice is not None:
                raise ValueError(f"voice {quoted(voice)} and reference audio given: a reference's speaker "
                                 f"embedding replaces a preset voice, send one of them")
            return reference_embedding(reference, self.config.speaker_embedding_dim)
        if voice is None:
            return next(iter(self.voice_embeddings.values()), None)
        if voice not in self.voice_embeddings:
            raise ValueError(f"unknown voice {quoted(voice)}; known voices: {list(self.voices)}")
        return self.voice_embeddings[voice]


def reference_embedding(reference: VoiceReference, dim: int) -> torch.Tensor:
    """A reference's x-vector [dim] float32; an in-context reference is a ValueError that says why."""
    if REF_CODES in reference.tensors or reference.text is not None:
        raise ValueError(f"CosyVoice 3 clones from the reference's speaker embedding alone: in-context cloning "
                         f"('{REF_CODES}', or a transcript in ref_text) needs CosyVoice's speech tokenizer, which "
                         f"is not shipped; send the reference as x-vector only (x_vector_only, no ref_text)")
    embedding = reference.tensors.get(SPEAKER_EMBEDDING)
    if embedding is None or tuple(embedding.shape) != (dim,):
        shape = None if embedding is None else list(embedding.shape)
        raise ValueError(f"a CosyVoice 3 reference needs '{SPEAKER_EMBEDDING}' of shape [{dim}], got {shape}")
    return embedding.detach().to("cpu", torch.float32)


def random_voices(config: CosyVoice3Config, seed: int) -> dict[str, torch.Tensor]:
    """Deterministic random speaker embeddings for the preset voices (CAMPPlus x-vectors are unnormalised, of
    norm ~10-20: N(0, 1) entries give ~14)."""
    generator = torch.Generator().manual_seed(seed + 2)
    return {name: torch.randn(config.speaker_embedding_dim, generator=generator, device="cpu")
            for name in config.voices}


def _check_voices(config: CosyVoice3Config, voices: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The voice embeddings, one [speaker_embedding_dim] per name of the config, in its order."""
    if set(voices) != set(config.voices):
        raise ValueError(f"voice embeddings {sorted(voices)} do not match the config's voices {list(config.voices)}")
    for name, v in voices.items():
        if tuple(v.shape) != (config.speaker_embedding_dim,):
            raise ValueError(f"voice {quoted(name)}: embedding of shape {list(v.shape)}, "
                             f"need [{config.speaker_embedding_dim}]")
    return {name: voices[name].detach().to("cpu", torch.float32) for name in config.voices}
