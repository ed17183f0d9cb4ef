"""Named configs: a tiny one for CPU tests and the two real sizes (random weights via `from_config`),
and the tiny preset's tokenizer (the checkpoint builder is `tiny.py`).

Real sizes follow the official 12 Hz CustomVoice configs (see shared/notes/MODELS.md). The voice and
language ids of the real presets are placeholders inside the special-id range: with random weights
only the shapes matter; a real checkpoint brings its own ids in config.json.
"""
from __future__ import annotations

from dataclasses import replace

from ..checkpoint_io import TINY_BPE_SENTENCES, train_byte_level_bpe
from .config import (BASE_MODEL_TYPE, CodePredictorConfig, Qwen3TTSConfig, SpeakerEncoderConfig, TalkerConfig,
                     tiny_speaker_encoder_config)

TINY_CODEBOOK_SIZE = 64
# codebooks per frame of the tiny presets: the real 16 made the code predictor, one small step per codebook,
# ~80 % of a tiny frame's CPU time and the test suite's largest cost; the fixtures under tests/fixtures keep the
# real 16 (their goldens come from the reference package)
TINY_NUM_CODE_GROUPS = 4
TINY_TEXT_VOCAB_SIZE = 384  # >= the tiny BPE's 362 tokens
TINY_TEXT_SPECIAL_IDS = {  # ids of the special tokens in the tiny BPE (trained with them first)
    "<|endoftext|>": 0, "<|im_start|>": 1, "<|im_end|>": 2,
    "<|tts_pad|>": 3, "<|tts_text_bos|>": 4, "<|tts_text_eod|>": 5,
}
TINY_BPE_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|tts_pad|>", "<|tts_text_bos|>",
                     "<|tts_text_eod|>"]
TINY_BPE_CORPUS = ["assistant user system\n"] * 50 + list(TINY_BPE_SENTENCES)
TINY_BPE_VOCAB_SIZE = 400

REAL_VOICES = ("vivian", "serena", "uncle_fu", "dylan", "eric", "ryan", "aiden", "ono_anna", "sohee")
REAL_DIALECTS = {"dylan": "beijing_dialect", "eric": "sichuan_dialect"}
REAL_LANGUAGES = ("chinese", "english", "japanese", "korean", "german", "french", "russian", "portuguese",
                  "spanish", "italian", "beijing_dialect", "sichuan_dialect")


def _codec_special_ids(codebook_size: int) -> dict[str, int]:
    """Control ids sit 100 above the codebook, as in the official configs (pad 2148 for 2048 codes)."""
    base = codebook_size + 100
    return dict(codec_pad_id=base, codec_bos_id=base + 1, codec_eos_token_id=base + 2, codec_think_id=base + 6,
                codec_nothink_id=base + 7, codec_think_bos_id=base + 8, codec_think_eos_id=base + 9)


def _tiny_speakers(vocab: int) -> dict[str, int]:
    """`tiny` and `tiny_b` (the default first), then the CustomVoice checkpoint's speakers, so a client written
    for it (voice "Ryan") runs against the tiny preset; none a dialect speaker (the preset has English only)."""
    names = ("tiny", "tiny_b", *REAL_VOICES)
    return {name: vocab - 10 - i for i, name in enumerate(names)}


def tiny() -> Qwen3TTSConfig:
    """2-layer talker (hidden 64) + 1-layer predictor (hidden 32), 4 codebooks of 64 codes."""
    vocab = TINY_CODEBOOK_SIZE + 1024
    predictor = CodePredictorConfig(vocab_size=TINY_CODEBOOK_SIZE, hidden_size=32, intermediate_size=64,
                                    num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                                    max_position_embeddings=64, num_code_groups=TINY_NUM_CODE_GROUPS)
    talker = TalkerConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=16, mrope_section=(2, 3, 3),
                          text_vocab_size=TINY_TEXT_VOCAB_SIZE, text_hidden_size=32, max_position_embeddings=4096,
                          spk_id=_tiny_speakers(vocab), spk_is_dialect=dict.fromkeys(_tiny_speakers(vocab), False),
                          codec_language_id={"english": TINY_CODEBOOK_SIZE + 2},
                          code_predictor=predictor, num_code_groups=TINY_NUM_CODE_GROUPS,
                          **_codec_special_ids(TINY_CODEBOOK_SIZE))
    s = TINY_TEXT_SPECIAL_IDS
    return Qwen3TTSConfig(talker=talker, tts_model_size="tiny", im_start_token_id=s["<|im_start|>"],
                          im_end_token_id=s["<|im_end|>"], tts_pad_token_id=s["<|tts_pad|>"],
                          tts_bos_token_id=s["<|tts_text_bos|>"], tts_eos_token_id=s["<|tts_text_eod|>"])


def _real(hidden_size: int, intermediate_size: int, size_name: str) -> Qwen3TTSConfig:
    languages = {name: 2050 + i for i, name in enumerate(REAL_LANGUAGES)}
    talker = TalkerConfig(hidden_size=hidden_size, intermediate_size=intermediate_size,
                          spk_id={name: 3000 + i for i, name in enumerate(REAL_VOICES)},
                          spk_is_dialect={name: REAL_DIALECTS.get(name, False) for name in REAL_VOICES},
                          codec_language_id=languages, **_codec_special_ids(2048))
    return Qwen3TTSConfig(talker=talker, tts_model_size=size_name)


def qwen3_tts_0_6b() -> Qwen3TTSConfig:
    return _real(hidden_size=1024, intermediate_size=3072, size_name="0b6")


def qwen3_tts_1_7b() -> Qwen3TTSConfig:
    return _real(hidden_size=2048, intermediate_size=6144, size_name="1b7")


def as_base(config: Qwen3TTSConfig, speaker_encoder: SpeakerEncoderConfig) -> Qwen3TTSConfig:
    """The Base (voice-cloning) twin of a config: no preset voices, a speaker encoder of the talker's width."""
    talker = replace(config.talker, spk_id={}, spk_is_dialect={})
    return replace(config, talker=talker, tts_model_type=BASE_MODEL_TYPE, speaker_encoder=speaker_encoder)


def tiny_base() -> Qwen3TTSConfig:
    return as_base(tiny(), tiny_speaker_encoder_config(tiny().talker.hidden_size))


def qwen3_tts_0_6b_base() -> Qwen3TTSConfig:
    return as_base(qwen3_tts_0_6b(), SpeakerEncoderConfig(enc_dim=1024))


def qwen3_tts_1_7b_base() -> Qwen3TTSConfig:
    return as_base(qwen3_tts_1_7b(), SpeakerEncoderConfig(enc_dim=2048))


PRESETS = {"qwen3-tts-tiny": tiny, "qwen3-tts-0.6b": qwen3_tts_0_6b, "qwen3-tts-1.7b": qwen3_tts_1_7b,
           "qwen3-tts-tiny-base": tiny_base, "qwen3-tts-0.6b-base": qwen3_tts_0_6b_base,
           "qwen3-tts-1.7b-base": qwen3_tts_1_7b_base}


def preset_config(name: str) -> Qwen3TTSConfig:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; known: {sorted(PRESETS)}")
    return PRESETS[name]()


def build_tiny_tokenizer():
    """A byte-level BPE trained offline on a few sentences, with the Qwen special tokens first (ids 0..5)."""
    from transformers import Qwen2TokenizerFast

    bpe = train_byte_level_bpe(TINY_BPE_SPECIALS, TINY_BPE_CORPUS, TINY_BPE_VOCAB_SIZE)
    tokenizer = Qwen2TokenizerFast(tokenizer_object=bpe, unk_token=None, bos_token=None,
                                   eos_token="<|endoftext|>", pad_token="<|endoftext|>", errors="replace")
    tokenizer.add_special_tokens({"additional_special_tokens": TINY_BPE_SPECIALS[1:]})
    return tokenizer
