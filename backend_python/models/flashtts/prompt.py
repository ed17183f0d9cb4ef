"""The FlashTTS prompt: stacked text and speech tracks, as its `Qwen2LM_MTP.inference_with_spkemb` lays them out.

Text ids t_0 .. t_{L-1}: t_0 is a token-level tag added to every other text token, e'_i = embed(t_i) + embed(t_0).
The LM input at position p is the sum of a text track and a speech track:

    p = 0:       embed(sot)  + spk_embed_convert(normalize(speaker embedding))
    p = 1:       e'_1        + embed(sos)
    p = 2 + n:   e'_{2+n}    + speech_embedding(speech token n)     (the text track only while 2 + n < L)

So the prefill is 2 positions, and a decoded token at position p carries the text token t_p with it: the text
leads the speech by one position and runs out after L - 2 speech tokens (`text_ids` stays in the slot's memory
for the decode steps). The voice is [speaker embedding (192) | reference embedding (128)]: the LM reads the
speaker embedding, the codec is conditioned on both.
"""
from __future__ import annotations

from typing import Sequence

import torch

from ..base import Prompt

TEXT_IDS = "text_ids"  # [L] int64: the tag, then the text tokens
VOICE = "voice"  # [speaker_dim + reference_dim] float32: the codec's condition; the LM reads the speaker part
NUM_PROMPT_POSITIONS = 2  # [sot + speaker, text + sos]
MIN_TEXT_IDS = 2  # the tag and one text token


def make_prompt(text_ids: Sequence[int], voice: torch.Tensor) -> Prompt:
    """text_ids: the tokenised text, tag first; voice: [speaker_dim + reference_dim] float32."""
    if len(text_ids) < MIN_TEXT_IDS:
        raise ValueError(f"FlashTTS needs at least {MIN_TEXT_IDS} text tokens (its first is a tag added to the "
                         f"others), got {len(text_ids)}")
    tensors = {TEXT_IDS: torch.tensor(list(text_ids), dtype=torch.int64), VOICE: voice.to(torch.float32)}
    return Prompt(num_tokens=NUM_PROMPT_POSITIONS, tensors=tensors)
