"""The Orpheus prompt (as canopylabs' `orpheus_tts` builds it):

    START_OF_HUMAN, tokenizer("{voice}: {text}") (with Llama-3's <|begin_of_text|>), END_OF_TEXT,
    END_OF_HUMAN, START_OF_AI, START_OF_SPEECH

after which the model speaks in 7-token frames until END_OF_SPEECH.
"""
from __future__ import annotations

import torch

from ..base import Prompt
from .tokens import END_OF_HUMAN, END_OF_TEXT, START_OF_AI, START_OF_HUMAN, START_OF_SPEECH

VOICES = ("tara", "leah", "jess", "leo", "dan", "mia", "zac", "zoe")  # the fine-tuned models' speakers


def voice_text(text: str, voice: str) -> str:
    return f"{voice}: {text}"


def make_prompt(text_ids: list[int]) -> Prompt:
    """text_ids: the tokenized "{voice}: {text}" -> the whole prefill sequence."""
    if not text_ids:
        raise ValueError("text must not be empty")
    ids = [START_OF_HUMAN, *text_ids, END_OF_TEXT, END_OF_HUMAN, START_OF_AI, START_OF_SPEECH]
    return Prompt(num_tokens=len(ids), tensors={"input_ids": torch.tensor(ids, dtype=torch.int64)})  # [L]
