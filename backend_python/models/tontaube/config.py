"""The config of TontaubeV1 (`tontaube-*`): four Qwen3 decoders, one per DualCodec codebook, over one flat vocabulary.

The semantic model (codebook 0, Qwen3-1.7B-shaped) reads the voice prompt's semantic codes and the text, one id a
character, and writes the utterance's semantic codes (12.5 Hz) until its end of speech: how many it writes is the
utterance's duration. Each refiner (codebooks 1..3, Qwen3-0.6B-shaped with 16, 8 and 4 layers) reads the text, the
completed lower codebooks' rows, and writes its own codebook's codes, as many as the semantic row has.

Every code is a token of the one vocabulary: `dc_base + offset(codebook) + code` (codebook 0 first with 16,384
codes, then 4,096 for each acoustic codebook), after the text tokenizer's ids and its special tokens (PAD, end of
speech, the text and audio markers). The head of each model is `fc2(Mish(fc1(h)))` over its own codebook's codes
(the semantic model's two more: end of speech, the audio marker). The official bundle holds one folder per
codebook (`cb0` … `cb3`, each a Qwen3 `config.json` with these fields: `audio_token_start_id`, `n_codebooks`,
`audio_head_hidden`, `target_codebook`, `pad_token_id`, `eos_token_id`, `audio_marker_token_id`,
`text_marker_token_id`, `chunk_realign_offset`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..layers.config_checks import check_attention

SEMANTIC_CODES = 16384  # codebook 0 (DualCodec's semantic codebook)
ACOUSTIC_CODES = 4096  # codebooks 1..3 (its first three acoustic RVQ levels)
NUM_CODEBOOKS = 4
CHUNK_REALIGN_OFFSET = 25  # the positions a text segment's audio may run past its text before the next segment's
PROMPT_CAPS = (750, 300, 150, 100)  # voice-prompt frames each model reads (of every prompt row it gets)
FRAME_RATE = 12.5
SAMPLE_RATE = 24000


def codebook_size(codebook: int) -> int:
    return SEMANTIC_CODES if codebook == 0 else ACOUSTIC_CODES


def codebook_offset(codebook: int) -> int:
    """Where a codebook's codes start after `dc_base`."""
    return 0 if codebook == 0 else SEMANTIC_CODES + (codebook - 1) * ACOUSTIC_CODES


def head_size(codebook: int) -> int:
    """The head's outputs: the codebook's codes (codebook 0: then end of speech, then the audio marker)."""
    return SEMANTIC_CODES + 2 if codebook == 0 else ACOUSTIC_CODES


@dataclass(frozen=True)
class TokenIds:
    """The vocabulary's landmarks: every text and special id sits below `dc_base`, the codes from it."""

    dc_base: int
    pad: int
    eos: int  # end of speech: the semantic model's end of the utterance
    text_marker: int  # between text segments
    audio_marker: int  # between the semantic codes of text segments (the semantic model's end of a segment)

    def __post_init__(self) -> None:
        specials = (self.pad, self.eos, self.text_marker, self.audio_marker)
        if len(set(specials)) != 4 or max(specials) >= self.dc_base or min(specials) < 0:
            raise ValueError(f"the special ids must be distinct and below dc_base: {self}")

    def code(self, codebook: int, code: int) -> int:
        return self.dc_base + codebook_offset(codebook) + code

    def codebook_of(self, token: int) -> int:
        """The codebook of a code id (>= dc_base)."""
        local = token - self.dc_base
        return 0 if local < SEMANTIC_CODES else 1 + (local - SEMANTIC_CODES) // ACOUSTIC_CODES

    def vocab_end(self, codebook: int) -> int:
        """One past the last code id of `codebook`: the vocabulary a model for that codebook needs at least."""
        return self.dc_base + codebook_offset(codebook) + codebook_size(codebook)


@dataclass(frozen=True)
class PredictorConfig:
    """One codebook's model: a Qwen3 decoder (GQA, q/k RMSNorm, SwiGLU, RoPE) and its audio head."""

    target_codebook: int
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    audio_head_hidden: int = 4096
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    max_position_embeddings: int = 40960

    def __post_init__(self) -> None:
        check_attention(self.num_attention_heads, self.num_key_value_heads, self.head_dim)

    @property
    def head_size(self) -> int:
        return head_size(self.target_codebook)


@dataclass(frozen=True)
class TontaubeConfig:
    ids: TokenIds
    predictors: tuple[PredictorConfig, ...]  # codebook 0 (semantic) first, then the refiners in order
    prompt_caps: tuple[int, ...] = PROMPT_CAPS
    frame_rate: float = FRAME_RATE
    sample_rate: int = SAMPLE_RATE
    extras: dict = field(default_factory=dict, compare=False)  # free-form notes carried with a checkpoint

    def __post_init__(self) -> None:
        if [p.target_codebook for p in self.predictors] != list(range(NUM_CODEBOOKS)):
            raise ValueError(f"TontaubeV1 has one model per codebook 0..{NUM_CODEBOOKS - 1}, in order")
        for p in self.predictors:
            if p.vocab_size < self.ids.vocab_end(p.target_codebook):
                raise ValueError(f"cb{p.target_codebook}'s vocab_size {p.vocab_size} does not reach its codes "
                                 f"(it needs {self.ids.vocab_end(p.target_codebook)})")
        if len(self.prompt_caps) != NUM_CODEBOOKS:
            raise ValueError(f"prompt_caps needs one cap per model, got {self.prompt_caps}")
