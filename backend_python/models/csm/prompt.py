"""CSM's text prompt: "[{speaker}]{text}", tokenized by the checkpoint's Llama-3 tokenizer with its
own special tokens (`<|begin_of_text|>` ... `<|end_of_text|>`), prefilled as text embeddings.
Voices are speaker ids ("0", "1", ...)."""
from __future__ import annotations

import torch

from protocol.quoting import quoted

from ..base import Prompt


def speaker_text(speaker: str, text: str) -> str:
    return f"[{speaker}]{text}"


def resolve_speaker(speakers: tuple[str, ...], voice: str | None) -> str:
    if voice is None:
        return speakers[0]
    if voice not in speakers:
        raise ValueError(f"unknown voice {quoted(voice)}; known voices: {list(speakers)}")
    return voice


def make_prompt(tokenizer, speaker: str, text: str) -> Prompt:
    if not text.strip():
        raise ValueError("text must not be empty")
    ids = tokenizer(speaker_text(speaker, text), add_special_tokens=True)["input_ids"]
    return Prompt(num_tokens=len(ids), tensors={"text_ids": torch.tensor(ids, dtype=torch.int64)})  # [L]


def with_context(prompt: Prompt, context: Prompt, frames: torch.Tensor) -> Prompt:
    """`prompt` after a context segment, laid out as transformers' CSM processor lays out a turn with audio:
    the segment's "[{speaker}]{text}" tokens, its audio frames, one end-of-audio frame, then the prompt.
    frames: [T, K] int64."""
    tensors = {**prompt.tensors, "context_ids": context.tensors["text_ids"], "context_codes": frames}
    return Prompt(num_tokens=context.num_tokens + frames.shape[0] + 1 + prompt.num_tokens, tensors=tensors)
