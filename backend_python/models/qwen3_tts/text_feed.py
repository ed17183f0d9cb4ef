"""A Qwen3-TTS request's text arriving in pieces (a streaming-text session).

The prompt is `assistant_text(text)` tokenised (prompt.py): prefill needs the role tokens and the
first text token, and every later text token trails, one per frame. So the request can be
prefilled once its first text token is final, and each frame waits only for its own trailing token.
The ids equal the whole text's (incremental_tokenizer.py), and the text is stripped as the whole
text is: leading whitespace never reaches the tokenizer, trailing whitespace is dropped at the close.
"""
from __future__ import annotations

import torch

from ..base import Prompt, TextFeed
from ..incremental_tokenizer import IncrementalTokenizer
from .config import Qwen3TTSConfig
from .voice_encoder import SPEAKER_EMBEDDING
from .prompt import NUM_ROLE_TOKENS, NUM_SUFFIX_TOKENS, assistant_text, codec_prefix_ids, make_prompt

ROLE_PREFIX, _, SUFFIX = assistant_text("\0").partition("\0")  # the text sits between these


class Qwen3TextFeed(TextFeed):
    def __init__(self, config: Qwen3TTSConfig, tokenizer, speaker_id: int, language_id: int,
                 speaker_embedding: torch.Tensor | None = None, instruct_ids: list[int] = ()) -> None:
        """`speaker_embedding` ([H] float32): a cloned voice's x-vector in the speaker's place (a Base model);
        `instruct_ids`: the request's instructions, tokenised (prompt.py)."""
        self._config, self._speaker_id, self._language_id = config, speaker_id, language_id
        self._instruct_ids = list(instruct_ids)
        self._speaker_embedding = speaker_embedding
        self._tokens = IncrementalTokenizer(tokenizer, ROLE_PREFIX)
        self._has_text = False  # a non-space character has arrived (leading whitespace is stripped)

    def append(self, text: str) -> None:
        if not self._has_text:
            text = text.lstrip()
            self._has_text = bool(text)
        if text:
            self._tokens.append(text)

    def close(self) -> None:
        self._tokens.strip_pending_end()
        self._tokens.close(SUFFIX)
        if len(self._tokens.ids) <= NUM_ROLE_TOKENS + NUM_SUFFIX_TOKENS:
            raise ValueError("the text is empty")

    @property
    def is_closed(self) -> bool:
        return self._tokens.is_closed

    @property
    def num_prompt_tokens(self) -> int:
        return len(self._instruct_ids) + NUM_ROLE_TOKENS + len(codec_prefix_ids(self._config, self._speaker_id,
                                                                                 self._language_id))

    def prompt(self) -> Prompt | None:
        ids = self._tokens.ids
        if self.is_closed:
            prompt = make_prompt(self._config, list(ids), self._speaker_id, self._language_id, self._instruct_ids)
        elif len(ids) > NUM_ROLE_TOKENS:  # the first text token is final
            prompt = make_prompt(self._config, ids[:NUM_ROLE_TOKENS + 1] + [0] * NUM_SUFFIX_TOKENS,
                                 self._speaker_id, self._language_id, self._instruct_ids)  # prefill reads ids[:4]
        else:
            return None
        if self._speaker_embedding is not None:
            prompt.tensors[SPEAKER_EMBEDDING] = self._speaker_embedding
        prompt.text = self
        return prompt

    @property
    def num_trailing(self) -> int:
        """Trailing text tokens final so far (tts_eos not counted)."""
        end = len(self._tokens.ids) - (NUM_SUFFIX_TOKENS if self.is_closed else 0)
        return max(0, end - NUM_ROLE_TOKENS - 1)

    def trailing_ids(self, start: int) -> torch.Tensor:
        """Trailing text tokens `start`.. of those final so far: [n] int64."""
        first = NUM_ROLE_TOKENS + 1
        return torch.tensor(self._tokens.ids[first + start:first + self.num_trailing], dtype=torch.int64)
