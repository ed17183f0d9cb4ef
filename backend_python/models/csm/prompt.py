"""CSM's text prompt: "[{speaker}]{text}", tokenized by the checkpoint's Llama-3 tokenizer with its
own special tokens (`<|begin_of_text|>` ... `<|end_of_text|>`), prefilled as text embeddings.
Voices are speaker ids ("0", "1", ...).

Earlier turns with audio go in front, as transformers' CSM processor lays out a conversation: a turn is
its "[{speaker}]{text}" tokens, its audio frames and one end-of-audio frame. A prompt has at most two:
a cloned voice's reference (`with_reference`), then the segment spoken before (`with_context`)."""
from __future__ import annotations

import torch

from protocol.quoting import quoted

from ..base import Prompt, VoiceReference

REF_CODES = "ref_codes"  # a cloned voice's `VoiceReference.tensors`: its Mimi codes [T, K]


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


TURNS = ("reference", "context")  # the audio turns a prompt may hold, in the order they are prefilled


def reference_transcript(reference: VoiceReference) -> str:
    if reference.text is None or not reference.text.strip():
        raise ValueError("CSM clones a voice in context: the reference audio needs its transcript (ref_text)")
    return reference.text


def reference_codes(reference: VoiceReference, num_codebooks: int, codebook_size: int) -> torch.Tensor:
    """The reference's codes as [T, K] int64 on the CPU; a ValueError names what is wrong with them."""
    codes = reference.tensors.get(REF_CODES)
    if codes is None:
        raise ValueError(f"the reference has no {quoted(REF_CODES)}: CSM clones from the reference's Mimi codes")
    if codes.dim() != 2 or codes.shape[0] < 1 or codes.shape[1] != num_codebooks or codes.is_floating_point():
        raise ValueError(f"{quoted(REF_CODES)} must be integer [T >= 1, {num_codebooks}], got {codes.dtype} "
                         f"{tuple(codes.shape)}")
    if codes.min() < 0 or codes.max() >= codebook_size:
        raise ValueError(f"{quoted(REF_CODES)} must lie in [0, {codebook_size}), got [{codes.min()}, {codes.max()}]")
    return codes.to("cpu", torch.int64)


def with_context(prompt: Prompt, context: Prompt, frames: torch.Tensor) -> Prompt:
    """`prompt` after a context segment (the segment spoken before): its "[{speaker}]{text}" tokens, its
    audio frames, one end-of-audio frame, then the prompt. frames: [T, K] int64."""
    return _with_turn(prompt, "context", context, frames)


def with_reference(prompt: Prompt, transcript: Prompt, codes: torch.Tensor) -> Prompt:
    """`prompt` after a cloned voice's reference, a turn like a context segment's that comes first of all:
    the transcript's tokens, the reference's frames (codes: [T, K] int64), one end-of-audio frame."""
    return _with_turn(prompt, "reference", transcript, codes)


def _with_turn(prompt: Prompt, turn: str, text: Prompt, frames: torch.Tensor) -> Prompt:
    tensors = {**prompt.tensors, f"{turn}_ids": text.tensors["text_ids"], f"{turn}_codes": frames}
    return Prompt(num_tokens=text.num_tokens + frames.shape[0] + 1 + prompt.num_tokens, tensors=tensors)


def audio_turns(prompt: Prompt) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The prompt's turns with audio, in order: (text ids [L] int64, frames [T, K] int64) each."""
    return [(prompt.tensors[f"{turn}_ids"], prompt.tensors[f"{turn}_codes"]) for turn in TURNS
            if f"{turn}_codes" in prompt.tensors]
