"""Frozen config of the FlashTTS LM (`Qwen2LM_MTP` in FlashTTS's cosyvoice/llm/llm.py): CosyVoice 2's speech LM
(Qwen2.5-0.5B, `CosyVoice-BlankEN`, 6561 speech codes) with multi-token-prediction blocks.

Speech ids: codes [0, 6561), then three stop ids (6561, 6562, 6563: FlashTTS stops at any of them); both
`speech_embedding` and the biased `llm_decoder` have 6564 rows. We sample the codes and 6561 as end of speech
(CosyVoice 2's eos; the other two stop ids are never sampled). The prompt reads two ids of Qwen's own
vocabulary, `sos_token_id` and `sot_token_id` (Qwen2.5's 151648 and 151649 in FlashTTS).

MTP: `head_num` blocks, each a Qwen2 decoder layer (`mtp_head_num` heads of hidden / mtp_head_num, MLP width
`mtp_intermediate_size`: FlashTTS builds them from `Qwen2Config(hidden_size, num_attention_heads=mtp_head_num,
num_key_value_heads=mtp_head_num)`, so the MLP takes transformers' default 22016), of which the first
`inference_head_num` run each step: one token per block.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from protocol.settings import read_settings

from ..layers.qwen2 import Qwen2Config
from ..speech_token_lm import SpeechVocab
from .description import MODEL_TYPE

SPEECH_TOKEN_SIZE = 6561  # CosyVoice 2's S3 tokenizer v2
NUM_STOP_IDS = 3  # FlashTTS's stop_token_ids: speech_token_size + 0, 1, 2
SPEAKER_EMBEDDING_DIM = 192  # CAMPPlus x-vector: the LM's spk_embed_convert input and the codec condition's head
REFERENCE_EMBEDDING_DIM = 128  # the ECAPA-TDNN embedding of the reference mel: the codec condition's tail
FRAME_RATE = 25.0
QWEN2_DEFAULT_INTERMEDIATE = 22016  # transformers' Qwen2Config default, which FlashTTS's MTP blocks keep
PRESET_VOICES = ("default", "alice", "bob")  # our presets' speakers (random embeddings)


@dataclass(frozen=True)
class FlashTTSConfig:
    """The LM's sizes, its speech and prompt ids, MTP blocks, frame limits and preset voices."""

    model_type: ClassVar[str] = MODEL_TYPE

    llm: Qwen2Config = field(default_factory=Qwen2Config)
    speech_token_size: int = SPEECH_TOKEN_SIZE
    sos_token_id: int = 151648  # Qwen text id, '<|start_of_speech|>' in FlashTTS's code
    sot_token_id: int = 151649  # Qwen text id, '<|start_of_text|>'
    head_num: int = 5  # MTP blocks in the checkpoint (FlashTTS ships mtp3/5/7/10 yamls; its class default is 5)
    inference_head_num: int = 5  # blocks run per step: tokens per step (`frames_per_step`)
    mtp_head_num: int = 14
    mtp_intermediate_size: int = QWEN2_DEFAULT_INTERMEDIATE
    speaker_embedding_dim: int = SPEAKER_EMBEDDING_DIM
    reference_embedding_dim: int = REFERENCE_EMBEDDING_DIM
    frame_rate: float = FRAME_RATE
    # FlashTTS's inference_with_spkemb: no end of speech before 2 tokens per text token, at most 20
    min_token_text_ratio: float = 2.0
    max_token_text_ratio: float = 20.0
    # prepended to the text before tokenising: FlashTTS adds the text's first token to every other text token as a
    # token-level language tag and speaks the rest; its frontend prepends nothing, so the text's own first token
    # plays that part ("" keeps that); a checkpoint trained with a tag first (e.g. "<|en|>") wants it here
    text_prefix: str = ""
    voices: tuple[str, ...] = PRESET_VOICES

    def __post_init__(self) -> None:
        if not 1 <= self.inference_head_num <= self.head_num:
            raise ValueError(f"need 1 <= inference_head_num <= head_num: {self.inference_head_num}, {self.head_num}")
        if self.llm.hidden_size % self.mtp_head_num:
            raise ValueError(f"hidden_size {self.llm.hidden_size} must split into {self.mtp_head_num} MTP heads")
        if max(self.sos_token_id, self.sot_token_id) >= self.llm.vocab_size:
            raise ValueError("sos_token_id and sot_token_id must be ids of the Qwen text vocabulary")
        if not 0 <= self.min_token_text_ratio <= self.max_token_text_ratio:
            raise ValueError(f"need 0 <= min_token_text_ratio <= max_token_text_ratio: {self}")
        if len(set(self.voices)) != len(self.voices):
            raise ValueError(f"voice names must be unique, got {self.voices}")

    @property
    def eos(self) -> int:
        return self.speech_token_size

    @property
    def condition_dim(self) -> int:
        """A voice: [speaker embedding | reference embedding], the codec's condition."""
        return self.speaker_embedding_dim + self.reference_embedding_dim

    @property
    def speech_vocab(self) -> SpeechVocab:
        rows = self.speech_token_size + NUM_STOP_IDS
        return SpeechVocab(num_codes=self.speech_token_size, eos=self.eos, num_embeddings=rows, num_head_rows=rows,
                           head_bias=True)

    @property
    def num_parameters(self) -> int:
        """The LM's parameters (backbone, speech table, biased head, speaker projection, the 2-row llm_embedding,
        MTP blocks), counted from the sizes."""
        h, rows = self.llm.hidden_size, self.speech_token_size + NUM_STOP_IDS
        block = 3 * (h * h + h) + h * h + 3 * h * self.mtp_intermediate_size + 2 * h
        return (self.llm.num_parameters + rows * h + rows * (h + 1) + (self.speaker_embedding_dim + 1) * h
                + 2 * h + self.head_num * block)

    def frame_limits(self, num_text_tokens: int) -> tuple[int, int]:
        """(min_frames, max_frames) for a text of that many tokens, as FlashTTS's min_len / max_len."""
        return int(num_text_tokens * self.min_token_text_ratio), int(num_text_tokens * self.max_token_text_ratio)

    def to_dict(self) -> dict[str, Any]:
        return {"model_type": MODEL_TYPE, **asdict(self), "llm": self.llm.to_dict(), "voices": list(self.voices)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "FlashTTSConfig":
        if d.get("model_type") != MODEL_TYPE:
            raise ValueError(f"not a FlashTTS config: model_type {d.get('model_type')!r}")
        given = {"llm": Qwen2Config.from_dict(d["llm"]), "voices": tuple(d.get("voices", ()))}
        return read_settings(cls, d, given=given, ignore_unknown=True)
