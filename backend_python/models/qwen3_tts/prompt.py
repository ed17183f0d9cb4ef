"""Prompt construction for text-only, named-speaker TTS (the reference's `generate` with
`non_streaming_mode=False`): text ids in, prefill embeddings + trailing text embeddings out.

Prefill sequence (hidden size H), for text ids `<|im_start|> assistant \\n t0 t1 .. tn <|im_end|> \\n
<|im_start|> assistant \\n` and codec ids C = [think.. , speaker, codec_pad, codec_bos] (N ids):
  3 role positions   text(ids[:3])
  N-1 positions      [tts_pad x (N-2), tts_bos] + codec(C[:-1])
  1 position         text(t0) + codec(codec_bos)
The remaining text t1..tn, then tts_eos, are added one per frame to the decode inputs ("trailing").
Prefill needs t0 only, so a text that arrives in pieces can start once t0 is final (text_feed.py).
"""
from __future__ import annotations

import torch

from ..base import Prompt
from .config import Qwen3TTSConfig
from .talker import Talker

NUM_ROLE_TOKENS = 3  # <|im_start|> assistant \n
NUM_SUFFIX_TOKENS = 5  # <|im_end|> \n <|im_start|> assistant \n
AUTO_LANGUAGE = "auto"
NO_LANGUAGE = -1  # language_id value meaning "auto": no language tag in the codec prefix


def assistant_text(text: str) -> str:
    return f"<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n"


def resolve_language(cfg: Qwen3TTSConfig, language: str, voice: str) -> int:
    """Codec language id, or NO_LANGUAGE; dialect speakers get their dialect under auto/chinese."""
    t = cfg.talker
    dialect = t.spk_is_dialect.get(voice, False)
    if language in (AUTO_LANGUAGE, "chinese") and dialect:
        return t.codec_language_id[dialect]
    return NO_LANGUAGE if language == AUTO_LANGUAGE else t.codec_language_id[language]


def codec_prefix_ids(cfg: Qwen3TTSConfig, speaker_id: int, language_id: int) -> list[int]:
    t = cfg.talker
    if language_id == NO_LANGUAGE:
        tags = [t.codec_nothink_id, t.codec_think_bos_id, t.codec_think_eos_id]
    else:
        tags = [t.codec_think_id, t.codec_think_bos_id, language_id, t.codec_think_eos_id]
    return tags + [speaker_id, t.codec_pad_id, t.codec_bos_id]


def make_prompt(cfg: Qwen3TTSConfig, text_ids: list[int], speaker_id: int, language_id: int) -> Prompt:
    if len(text_ids) <= NUM_ROLE_TOKENS + NUM_SUFFIX_TOKENS:
        raise ValueError("text must not be empty")
    num_codec = len(codec_prefix_ids(cfg, speaker_id, language_id))
    tensors = {"text_ids": torch.tensor(text_ids, dtype=torch.int64),  # [L_text]
               "speaker_id": torch.tensor(speaker_id, dtype=torch.int64),  # [] talker codec id
               "language_id": torch.tensor(language_id, dtype=torch.int64)}  # [] codec id or NO_LANGUAGE
    return Prompt(num_tokens=NUM_ROLE_TOKENS + num_codec, tensors=tensors)


@torch.no_grad()
def prompt_embeddings(cfg: Qwen3TTSConfig, talker: Talker, prompt: Prompt,
                      device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """-> (prefill embeds [num_tokens, H], trailing text embeds [num_text_tokens, H]) of a whole text."""
    ids = prompt.tensors["text_ids"]
    return prefill_embeddings(cfg, talker, prompt, device), trailing_embeddings(
        cfg, talker, ids[NUM_ROLE_TOKENS + 1:-NUM_SUFFIX_TOKENS], True, device)


@torch.no_grad()
def prefill_embeddings(cfg: Qwen3TTSConfig, talker: Talker, prompt: Prompt, device: torch.device) -> torch.Tensor:
    """The prefill embeds [num_tokens, H]: they need the text's first token only."""
    codec_ids = codec_prefix_ids(cfg, int(prompt.tensors["speaker_id"]), int(prompt.tensors["language_id"]))
    # ids go to the device without waiting for it: `torch.tensor(..., device=cuda)` synchronises with the
    # decode step in flight, which would undo the engine's overlapped step at every admission
    codec = talker.embed_codec(to_device(codec_ids, device))  # [N, H]
    tts_bos, tts_pad = talker.embed_text(to_device([[cfg.tts_bos_token_id, cfg.tts_pad_token_id]], device))[0]
    ids = prompt.tensors["text_ids"][:NUM_ROLE_TOKENS + 1].to(device, non_blocking=True)
    role = talker.embed_text(ids[:NUM_ROLE_TOKENS])
    tags = torch.cat((tts_pad.expand(len(codec_ids) - 2, -1), tts_bos[None])) + codec[:-1]
    first_text = talker.embed_text(ids[NUM_ROLE_TOKENS:NUM_ROLE_TOKENS + 1]) + codec[-1:]
    return torch.cat((role, tags, first_text))


@torch.no_grad()
def trailing_embeddings(cfg: Qwen3TTSConfig, talker: Talker, ids, with_eos: bool, device: torch.device) -> torch.Tensor:
    """Text tokens after the first (a tensor or list of ids), then tts_eos where the text has ended: [n, H]."""
    ids = torch.as_tensor(ids, dtype=torch.int64)
    if with_eos:
        ids = torch.cat((ids, torch.tensor([cfg.tts_eos_token_id])))
    return talker.embed_text(ids.to(device, non_blocking=True))


def to_device(values: list, device: torch.device) -> torch.Tensor:
    """A small host list as a device tensor, copied without a wait for the device (pageable memory is
    staged at once; the device reads it in stream order)."""
    return torch.tensor(values).to(device, non_blocking=True)


@torch.no_grad()
def pad_embedding(cfg: Qwen3TTSConfig, talker: Talker, device: torch.device) -> torch.Tensor:
    """The tts_pad text embedding added to decode inputs once the trailing text is used up: [H]."""
    return talker.embed_text(torch.tensor([cfg.tts_pad_token_id], device=device))[0]
