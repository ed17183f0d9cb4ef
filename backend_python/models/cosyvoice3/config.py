"""Frozen config of the CosyVoice 3 LM (`CosyVoice3LM` in the reference's cosyvoice/llm/llm.py): a Qwen2 text
LM (Qwen2.5-0.5B, `CosyVoice-BlankEN`) that speaks 25 Hz speech tokens of a 6561-code FSQ tokenizer.

Speech ids: codes [0, 6561); the 200 ids above them are special, laid out as the reference does: sos 6561,
eos 6562, task_id 6563, fill 6564 (the rest unused). Both `speech_embedding` and `llm_decoder` have
6561 + 200 rows. Written to and read from our checkpoint's config.json; an official directory's sizes come
from its cosyvoice3.yaml and CosyVoice-BlankEN/config.json (`checkpoint.py`).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from protocol.settings import read_settings

from ..layers.qwen2 import Qwen2Config
from ..speech_token_lm import SpeechVocab
from .description import MODEL_TYPE

SPEECH_TOKEN_SIZE = 6561  # FSQ speech tokenizer v3: 3^8 codes
NUM_SPECIAL_SPEECH_IDS = 200  # the reference's speech_embedding / llm_decoder rows past the codes
SPEAKER_EMBEDDING_DIM = 192  # CAMPPlus x-vector, the flow decoder's condition
FRAME_RATE = 25.0  # speech tokens per second (token_frame_rate)
PRESET_VOICES = ("default", "alice", "bob")  # our presets' speakers (random embeddings, like spk2info's)


@dataclass(frozen=True)
class CosyVoice3Config:
    """The LM's sizes, its speech ids and frame limits, and its preset voices."""

    model_type: ClassVar[str] = MODEL_TYPE

    llm: Qwen2Config = field(default_factory=Qwen2Config)
    speech_token_size: int = SPEECH_TOKEN_SIZE
    num_special_speech_ids: int = NUM_SPECIAL_SPEECH_IDS
    speaker_embedding_dim: int = SPEAKER_EMBEDDING_DIM
    frame_rate: float = FRAME_RATE
    # the reference's inference(): end of speech is blocked for the first 2 tokens per text token, forced after 20
    min_token_text_ratio: float = 2.0
    max_token_text_ratio: float = 20.0
    voices: tuple[str, ...] = PRESET_VOICES

    def __post_init__(self) -> None:
        if self.num_special_speech_ids < 4:
            raise ValueError(f"need >= 4 special speech ids (sos, eos, task_id, fill), "
                             f"got {self.num_special_speech_ids}")
        if not 0 <= self.min_token_text_ratio <= self.max_token_text_ratio:
            raise ValueError(f"need 0 <= min_token_text_ratio <= max_token_text_ratio: {self}")
        if len(set(self.voices)) != len(self.voices):
            raise ValueError(f"voice names must be unique, got {self.voices}")

    @property
    def sos(self) -> int:
        return self.speech_token_size

    @property
    def eos(self) -> int:
        return self.speech_token_size + 1

    @property
    def task_id(self) -> int:
        return self.speech_token_size + 2

    @property
    def fill(self) -> int:
        """Bistream training's fill token; never sampled here (only codes and eos are)."""
        return self.speech_token_size + 3

    @property
    def speech_vocab(self) -> SpeechVocab:
        rows = self.speech_token_size + self.num_special_speech_ids
        return SpeechVocab(num_codes=self.speech_token_size, eos=self.eos, num_embeddings=rows, num_head_rows=rows)

    @property
    def num_parameters(self) -> int:
        """The LM's parameters (backbone, speech embedding, bias-free head), counted from the sizes."""
        rows = self.speech_token_size + self.num_special_speech_ids
        return self.llm.num_parameters + 2 * rows * self.llm.hidden_size

    def frame_limits(self, num_text_tokens: int) -> tuple[int, int]:
        """(min_frames, max_frames) for a text of that many tokens, as the reference's min_len / max_len."""
        return int(num_text_tokens * self.min_token_text_ratio), int(num_text_tokens * self.max_token_text_ratio)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        return {"model_type": MODEL_TYPE, **d, "llm": self.llm.to_dict(), "voices": list(self.voices)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CosyVoice3Config":
        if d.get("model_type") != MODEL_TYPE:
            raise ValueError(f"not a CosyVoice 3 config: model_type {d.get('model_type')!r}")
        given = {"llm": Qwen2Config.from_dict(d["llm"]), "voices": tuple(d.get("voices", ()))}
        return read_settings(cls, d, given=given, ignore_unknown=True)
