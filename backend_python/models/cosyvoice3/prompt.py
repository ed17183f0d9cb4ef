"""The CosyVoice 3 prompt, as the reference's `Qwen2LM.inference` lays it out for CosyVoice 3:

    speech_embedding[sos], embed_tokens(prompt_text + text), speech_embedding[task_id], speech_embedding(prompt speech)

after which the LM speaks speech tokens until eos. CosyVoice 3 needs an instruct before `<|endofprompt|>` in
its text (the reference asserts it); without one we prepend `INSTRUCT_PREFIX`, as its cross-lingual and
fine-grained-control examples do. The voice never enters the LM's prompt (its LM takes no speaker embedding):
it selects the 192-d speaker embedding the codec's flow decoder is conditioned on, carried in the prompt's
tensors for `codec_condition`. A streamed text's later segment continues the one before it as the reference's
zero-shot mode does: the earlier segment's text as prompt text and its speech tokens as prompt speech.
"""
from __future__ import annotations

from typing import Sequence

import torch

from ..base import Prompt

ENDOFPROMPT = "<|endofprompt|>"
INSTRUCT_PREFIX = f"You are a helpful assistant.{ENDOFPROMPT}"
TEXT_IDS = "text_ids"  # [T] int64: prompt text then text tokens, between sos and task_id
PROMPT_SPEECH = "prompt_speech"  # [S] int64: speech tokens after task_id that the LM continues (zero-shot)
NUM_TEXT_TOKENS = "num_text_tokens"  # [] int64: the tokens of the text to speak (the frame limits' base)
SPEAKER_EMBEDDING = "speaker_embedding"  # [192] float32: the codec's condition


def with_instruct(text: str) -> str:
    """The text as CosyVoice 3 takes it: an instruct ending in <|endofprompt|>, then what to say."""
    return text if ENDOFPROMPT in text else INSTRUCT_PREFIX + text


def make_prompt(text_ids: Sequence[int], speaker_embedding: torch.Tensor | None, prompt_text_ids: Sequence[int] = (),
                prompt_speech: torch.Tensor | None = None) -> Prompt:
    """text_ids: the tokenised text to speak; prompt_text_ids / prompt_speech: a continued segment's text and
    speech tokens ([S] int64); speaker_embedding: [192] float32 or None (the codec's default)."""
    if not text_ids:
        raise ValueError("text must not be empty")
    speech = torch.zeros(0, dtype=torch.int64) if prompt_speech is None else prompt_speech.to(torch.int64)
    tensors = {TEXT_IDS: torch.tensor([*prompt_text_ids, *text_ids], dtype=torch.int64),
               PROMPT_SPEECH: speech, NUM_TEXT_TOKENS: torch.tensor(len(text_ids))}
    if speaker_embedding is not None:
        tensors[SPEAKER_EMBEDDING] = speaker_embedding.to(torch.float32)
    num_tokens = 1 + tensors[TEXT_IDS].shape[0] + 1 + speech.shape[0]  # sos, text, task_id, prompt speech
    return Prompt(num_tokens=num_tokens, tensors=tensors)

