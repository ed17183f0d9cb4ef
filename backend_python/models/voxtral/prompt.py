"""Voxtral-TTS's prompt, as mistral-common's `encode_speech_request` lays it out:

    <s> [BEGIN_AUDIO] [AUDIO] × N [NEXT_AUDIO_TEXT] {text} [REPEAT_AUDIO_TEXT] [BEGIN_AUDIO]

The N [AUDIO] positions take the voice's embedding rows ([N, dim], a preset's `voice_embedding/{name}.pt`)
in place of the token's; the text has no <s> or </s> of its own. The first frame is read off the hidden state
at the last [BEGIN_AUDIO] (the prefill's last position), as vllm-omni and sglang-omni do.

`Prompt.tensors`: "ids" [L] int64; "voice" [1] int64, the voice's index in the model's voice list.
"""
from __future__ import annotations

import torch

from protocol.quoting import quoted

from ..base import Prompt
from .config import VoxtralConfig


def resolve_voice(voices: tuple[str, ...], voice: str | None) -> str:
    """A voice name (None: the first preset) or a ValueError naming the known ones."""
    if voice is None:
        return voices[0]
    if voice not in voices:
        raise ValueError(f"unknown voice {quoted(voice)}; known voices: {list(voices)}")
    return voice


def build_prompt(config: VoxtralConfig, tokenizer, text: str, voice_index: int, voice_length: int) -> Prompt:
    if not text.strip():
        raise ValueError("text must not be empty")
    c = config
    ids = ([c.bos_token_id, c.begin_audio_token_id] + [c.audio_token_id] * voice_length
           + [c.next_audio_text_token_id] + tokenizer.encode(text)
           + [c.repeat_audio_text_token_id, c.begin_audio_token_id])
    return Prompt(num_tokens=len(ids), tensors={"ids": torch.tensor(ids, dtype=torch.int64),
                                                "voice": torch.tensor([voice_index], dtype=torch.int64)})
