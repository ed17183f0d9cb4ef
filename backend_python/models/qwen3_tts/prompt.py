"""Prompt construction for text-only, named-speaker TTS (the reference's `generate` with
`non_streaming_mode=False`): text ids in, prefill embeddings + trailing text embeddings out.

Prefill sequence (hidden size H), for text ids `<|im_start|> assistant \\n t0 t1 .. tn <|im_end|> \\n
<|im_start|> assistant \\n` and codec ids C = [think.. , speaker, codec_pad, codec_bos] (N ids):
  3 role positions   text(ids[:3])
  N-1 positions      [tts_pad x (N-2), tts_bos] + codec(C[:-1])
  1 position         text(t0) + codec(codec_bos)
The remaining text t1..tn, then tts_eos, are added one per frame to the decode inputs ("trailing").
Prefill needs t0 only, so a text that arrives in pieces can start once t0 is final (text_feed.py).

A Base model clones a voice (`VoiceReference`): in x-vector mode the reference's speaker embedding takes
the speaker's place in C; in in-context (ICL) mode the last prefill position is replaced by the
reference: text R = text(ref ids + t0..tn) + tts_eos and codec Q = [codec(codec_bos), frame embeds of the
reference codes] (M positions, each the sum of its 16 codebook embeddings). The prefill gets R[:M] + Q,
with R padded by tts_pad when it is shorter; R[M:] trails.

Two request options change this (models/base.py PromptOptions). Instructions (a CustomVoice model's instruct)
go first, as their own text: text(`<|im_start|>user\n{instructions}<|im_end|>\n`) before the role positions.
A text-first prompt (the reference's `non_streaming_mode=True`) puts the whole text in the prefill instead of
trailing it: after the N-1 tag positions, text(t0..tn) + tts_eos over codec_pad, then tts_pad over codec_bos
(ICL: text(ref ids + t0..tn) + tts_eos over codec_pad, then Q + tts_pad); nothing trails.

Every layout starts with the same head: the instructions, the 3 role positions and the N-1 codec tag positions
(`prefix_embeddings`), P = L_instruct + 3 + N - 1 positions that do not depend on the request's text. That head is
the prompt's cacheable prefix (models/prompt_cache.py, `prefix_key`): a preset voice's for its speaker, language
and instructions, a cloned voice's for its speaker embedding and language. For an ICL prompt only the head is
shared: its next positions lay the request's text over the reference frames. Each layout takes `skip_head`: a
prompt whose head is cached builds only the positions after it (the head's embeddings are not computed).
"""
from __future__ import annotations

import torch

from ..base import AUTO_LANGUAGE, Prompt, VoiceReference, to_device
from ..prompt_cache import PrefixKey, speaker_digest
from .config import Qwen3TTSConfig
from .talker import Talker
from .voice_encoder import REF_CODES, SPEAKER_EMBEDDING

NUM_ROLE_TOKENS = 3  # <|im_start|> assistant \n
NUM_REF_SUFFIX_TOKENS = 2  # <|im_end|> \n after a reference transcript
SPEAKER_FROM_END = -3  # the speaker's index in the codec prefix: [tags.., speaker, codec_pad, codec_bos]
NUM_SUFFIX_TOKENS = 5  # <|im_end|> \n <|im_start|> assistant \n
NO_LANGUAGE = -1  # language_id value meaning "auto": no language tag in the codec prefix
INSTRUCT_IDS = "instruct_ids"  # a prompt's instructions, tokenised: [L_instruct] int64
TEXT_FIRST = "text_first"  # present: the whole text is in the prefill (its value is not read)


def assistant_text(text: str) -> str:
    return f"<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n"


def instruct_text(instructions: str) -> str:
    """Instructions as the reference tokenises them: a user turn before the assistant's."""
    return f"<|im_start|>user\n{instructions}<|im_end|>\n"


def reference_text(text: str) -> str:
    """A reference transcript as the reference tokenises it (its ids between role and suffix go in the prompt)."""
    return f"<|im_start|>assistant\n{text}<|im_end|>\n"


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


def make_prompt(cfg: Qwen3TTSConfig, text_ids: list[int], speaker_id: int, language_id: int,
                instruct_ids: list[int] = (), is_text_first: bool = False) -> Prompt:
    if len(text_ids) <= NUM_ROLE_TOKENS + NUM_SUFFIX_TOKENS:
        raise ValueError("text must not be empty")
    num_codec = len(codec_prefix_ids(cfg, speaker_id, language_id))
    tensors = {"text_ids": torch.tensor(text_ids, dtype=torch.int64),  # [L_text]
               "speaker_id": torch.tensor(speaker_id, dtype=torch.int64),  # [] talker codec id
               "language_id": torch.tensor(language_id, dtype=torch.int64)}  # [] codec id or NO_LANGUAGE
    prompt = Prompt(num_tokens=len(instruct_ids) + NUM_ROLE_TOKENS + num_codec, tensors=tensors)
    if instruct_ids:
        tensors[INSTRUCT_IDS] = torch.tensor(instruct_ids, dtype=torch.int64)
    if is_text_first:  # the text after t0, tts_eos and the tts_pad + codec_bos position join the prefill
        tensors[TEXT_FIRST] = torch.tensor(True)
        prompt.num_tokens += len(text_ids) - NUM_ROLE_TOKENS - NUM_SUFFIX_TOKENS + 1
    return prompt


def prefix_key(cfg: Qwen3TTSConfig, prompt: Prompt) -> PrefixKey:
    """What the prompt's head holds: its instructions' and role tokens' ids, its codec tag ids and, for a cloned
    voice, its speaker embedding's digest."""
    text = tuple(prompt.tensors[INSTRUCT_IDS].tolist()) if INSTRUCT_IDS in prompt.tensors else ()
    text += tuple(prompt.tensors["text_ids"][:NUM_ROLE_TOKENS].tolist())
    codec = tuple(_codec_ids(cfg, prompt))
    embedding = prompt.tensors.get(SPEAKER_EMBEDDING)
    return PrefixKey((text, codec), None if embedding is None else speaker_digest(embedding))


def num_prefix_positions(cfg: Qwen3TTSConfig, prompt: Prompt) -> int:
    """P, the head's positions (`prefix_embeddings`): instructions, role tokens, the codec tags but codec_bos. Counted
    from the ids, not the head's embeddings: a layout's prefill holds its head without marking where it ends
    (tests/unit/test_prompt_cache.py pins the two together in every layout)."""
    num_instruct = prompt.tensors[INSTRUCT_IDS].shape[0] if INSTRUCT_IDS in prompt.tensors else 0
    return num_instruct + NUM_ROLE_TOKENS + len(_codec_ids(cfg, prompt)) - 1


def _codec_ids(cfg: Qwen3TTSConfig, prompt: Prompt) -> list[int]:
    return codec_prefix_ids(cfg, int(prompt.tensors["speaker_id"]), int(prompt.tensors["language_id"]))


def speaker_embedding(cfg: Qwen3TTSConfig, reference: VoiceReference) -> torch.Tensor:
    """The reference's x-vector, checked: [H] float32."""
    embedding = reference.tensors.get(SPEAKER_EMBEDDING)
    if embedding is None or embedding.shape != (cfg.talker.hidden_size,):
        shape = None if embedding is None else tuple(embedding.shape)
        raise ValueError(f"speaker embedding must be [{cfg.talker.hidden_size}], got {shape}")
    return embedding.float()


def make_reference_prompt(cfg: Qwen3TTSConfig, text_ids: list[int], language_id: int, reference: VoiceReference,
                          ref_text_ids: list[int] | None, is_text_first: bool = False) -> Prompt:
    """A Base model's prompt: the reference's speaker embedding, and in ICL mode its transcript's ids (between
    the role and the suffix tokens) and its codes."""
    # the pad id holds the speaker's place
    prompt = make_prompt(cfg, text_ids, cfg.talker.codec_pad_id, language_id, is_text_first=is_text_first)
    prompt.tensors[SPEAKER_EMBEDDING] = speaker_embedding(cfg, reference)  # [H]
    if ref_text_ids is None:
        return prompt
    codes = reference.tensors[REF_CODES]
    if codes.dim() != 2 or codes.shape[1] != cfg.talker.num_code_groups or codes.shape[0] < 1:
        raise ValueError(f"ref_codes must be [T >= 1, {cfg.talker.num_code_groups}], got {tuple(codes.shape)}")
    if codes.min() < 0 or codes.max() >= cfg.talker.codebook_size:
        raise ValueError(f"ref_codes must be in [0, {cfg.talker.codebook_size})")
    prompt.tensors[REF_CODES] = codes.long()  # [T, K]
    prompt.tensors["ref_text_ids"] = torch.tensor(ref_text_ids, dtype=torch.int64)  # [L_ref]
    prompt.num_tokens += codes.shape[0]  # the first text position becomes codec_bos + T reference frames
    if is_text_first:  # the transcript's ids join the prefill too
        prompt.num_tokens += len(ref_text_ids)
    return prompt


@torch.no_grad()
def prompt_embeddings(cfg: Qwen3TTSConfig, talker: Talker, prompt: Prompt, device: torch.device,
                      skip_head: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """-> (prefill embeds [num_tokens, H], or [num_tokens - P, H] with `skip_head`; trailing text embeds
    [num_text_tokens, H]) of a whole text."""
    if REF_CODES in prompt.tensors:
        return icl_embeddings(cfg, talker, prompt, device, skip_head)
    if TEXT_FIRST in prompt.tensors:
        return text_first_embeddings(cfg, talker, prompt, device, skip_head)
    ids = prompt.tensors["text_ids"]
    return prefill_embeddings(cfg, talker, prompt, device, skip_head), trailing_embeddings(
        cfg, talker, ids[NUM_ROLE_TOKENS + 1:-NUM_SUFFIX_TOKENS], True, device)


@torch.no_grad()
def prefill_embeddings(cfg: Qwen3TTSConfig, talker: Talker, prompt: Prompt, device: torch.device,
                       skip_head: bool = False) -> torch.Tensor:
    """The prefill embeds [num_tokens, H] (without the head: [1, H]): they need the text's first token only."""
    head, codec_bos = prefix_embeddings(cfg, talker, prompt, device, skip_head)
    ids = prompt.tensors["text_ids"][NUM_ROLE_TOKENS:NUM_ROLE_TOKENS + 1].to(device, non_blocking=True)
    return torch.cat((head, talker.embed_text(ids) + codec_bos))


def prefix_embeddings(cfg: Qwen3TTSConfig, talker: Talker, prompt: Prompt, device: torch.device,
                      skip_head: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """-> (the head: instructions, role and codec-tag positions [P, H], or [0, H] with `skip_head` (a cached head,
    none of whose embeddings are computed), the codec_bos embedding [1, H])."""
    if skip_head:
        codec_bos = talker.embed_codec(to_device([cfg.talker.codec_bos_id], device))  # [1, H]
        return codec_bos[:0], codec_bos
    codec_ids = _codec_ids(cfg, prompt)
    # ids go to the device without waiting for it: `torch.tensor(..., device=cuda)` synchronises with the
    # decode step in flight, which would undo the engine's overlapped step at every admission
    codec = talker.embed_codec(to_device(codec_ids, device))  # [N, H]
    if SPEAKER_EMBEDDING in prompt.tensors:  # a cloned voice: its x-vector in the speaker's place
        codec[SPEAKER_FROM_END] = prompt.tensors[SPEAKER_EMBEDDING].to(device, codec.dtype, non_blocking=True)
    tts_bos, tts_pad = talker.embed_text(to_device([[cfg.tts_bos_token_id, cfg.tts_pad_token_id]], device))[0]
    role = talker.embed_text(prompt.tensors["text_ids"][:NUM_ROLE_TOKENS].to(device, non_blocking=True))
    tags = torch.cat((tts_pad.expand(len(codec_ids) - 2, -1), tts_bos[None])) + codec[:-1]
    if INSTRUCT_IDS in prompt.tensors:
        role = torch.cat((talker.embed_text(prompt.tensors[INSTRUCT_IDS].to(device, non_blocking=True)), role))
    return torch.cat((role, tags)), codec[-1:]


@torch.no_grad()
def text_first_embeddings(cfg: Qwen3TTSConfig, talker: Talker, prompt: Prompt, device: torch.device,
                          skip_head: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """A text-first prompt: (prefill [num_tokens, H] (less P with `skip_head`), nothing trailing [0, H])."""
    head, codec_bos = prefix_embeddings(cfg, talker, prompt, device, skip_head)
    ids = prompt.tensors["text_ids"][NUM_ROLE_TOKENS:-NUM_SUFFIX_TOKENS]
    text = trailing_embeddings(cfg, talker, ids, True, device)  # [L + 1, H], tts_eos last
    return torch.cat((head, text + _codec_pad(cfg, talker, device), _tts_pad(cfg, talker, device) + codec_bos)), text[:0]


def _codec_pad(cfg: Qwen3TTSConfig, talker: Talker, device: torch.device) -> torch.Tensor:
    return talker.embed_codec(to_device([cfg.talker.codec_pad_id], device))  # [1, H]


def _tts_pad(cfg: Qwen3TTSConfig, talker: Talker, device: torch.device) -> torch.Tensor:
    return talker.embed_text(to_device([cfg.tts_pad_token_id], device))  # [1, H]


@torch.no_grad()
def icl_embeddings(cfg: Qwen3TTSConfig, talker: Talker, prompt: Prompt, device: torch.device,
                   skip_head: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """In-context cloning: (prefill [num_tokens, H] (less P with `skip_head`), trailing [n, H]), the reference text
    and codes in front."""
    head, codec_bos = prefix_embeddings(cfg, talker, prompt, device, skip_head)
    ids = torch.cat((prompt.tensors["ref_text_ids"], prompt.tensors["text_ids"][NUM_ROLE_TOKENS:-NUM_SUFFIX_TOKENS]))
    text = trailing_embeddings(cfg, talker, ids, True, device)  # [L, H], tts_eos last
    codec = torch.cat((codec_bos, frame_embeddings(talker, prompt.tensors[REF_CODES].to(device, non_blocking=True))))
    if TEXT_FIRST in prompt.tensors:  # the whole text over codec_pad, then the reference frames over tts_pad
        return torch.cat((head, text + _codec_pad(cfg, talker, device), codec + _tts_pad(cfg, talker, device))), text[:0]
    m = codec.shape[0]
    if text.shape[0] > m:
        return torch.cat((head, text[:m] + codec)), text[m:]
    tts_pad = talker.embed_text(to_device([cfg.tts_pad_token_id], device))[0]
    text = torch.cat((text, tts_pad.expand(m - text.shape[0], -1)))
    return torch.cat((head, text + codec)), text[:0]


def frame_embeddings(talker: Talker, codes: torch.Tensor) -> torch.Tensor:
    """codes: [T, K] -> [T, H], the sum of each frame's codebook embeddings (codebook 0 the talker's)."""
    tables = talker.code_predictor.model.codec_embedding
    parts = [talker.embed_codec(codes[:, 0])] + [table(codes[:, i + 1]) for i, table in enumerate(tables)]
    return torch.stack(parts, dim=1).sum(dim=1)


@torch.no_grad()
def trailing_embeddings(cfg: Qwen3TTSConfig, talker: Talker, ids, with_eos: bool, device: torch.device) -> torch.Tensor:
    """Text tokens after the first (a tensor or list of ids), then tts_eos where the text has ended: [n, H]."""
    ids = torch.as_tensor(ids, dtype=torch.int64)
    if with_eos:
        ids = torch.cat((ids, torch.tensor([cfg.tts_eos_token_id])))
    return talker.embed_text(ids.to(device, non_blocking=True))


@torch.no_grad()
def pad_embedding(cfg: Qwen3TTSConfig, talker: Talker, device: torch.device) -> torch.Tensor:
    """The tts_pad text embedding added to decode inputs once the trailing text is used up: [H]."""
    return talker.embed_text(torch.tensor([cfg.tts_pad_token_id], device=device))[0]
