"""Zonos's prompt: the prefix conditions of one request, built on the CPU.

The reference turns text into eSpeak IPA phonemes (with number normalisation) and embeds the phoneme symbols;
eSpeak cannot be installed here, so our front end embeds the text's own characters through the same symbol table:
lowercased (IPA is lowercase), each character that is a symbol of the table (ASCII letters and punctuation are)
takes that symbol's id, any other is UNK, framed by BOS and EOS as the reference frames phonemes. A real
checkpoint therefore hears spelling, not phonemes (README, "Zonos specifics").

The other conditions take the reference's `make_cond_dict` defaults: emotion (normalised to sum 1), fmax
22050 Hz, pitch_std 20, speaking_rate 15, language en-us; the speaker is a preset voice's 128-d embedding, or
none (the model's learned unconditional speaker). The unconditional prefix of classifier-free guidance keeps the
phonemes and takes every other conditioner's learned unconditional vector, as the reference's
`prepare_conditioning` does.
"""
from __future__ import annotations

import unicodedata

import torch

from protocol.quoting import quoted

from ..base import Prompt

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
_PUNCTUATION = ';:,.!?¡¿—…"«»“”() *~-/\\&'
_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_LETTERS_IPA = ("ɑɐɒæɓʙβɔɕçɗɖðʤəɘɚɛɜɝɞɟʄɡɠɢʛɦɧħɥʜɨɪʝɭɬɫɮʟɱɯɰŋɳɲɴøɵɸθœɶʘɹɺɾɻʀʁɽʂʃʈʧʉʊʋⱱʌɣɤʍχʎʏʑʐʒʔʡʕʢǀǁǂǃˈˌːˑʼʴʰʱʲʷˠˤ˞↓↑→↗↘'̩'ᵻ")
SYMBOLS = (*_PUNCTUATION, *_LETTERS, *_LETTERS_IPA)  # the reference's table, duplicates and all
NUM_PHONEME_IDS = 4 + len(SYMBOLS)  # rows of the phoneme embedding: the specials, then the symbols
_SYMBOL_IDS = {s: i for i, s in enumerate(SYMBOLS, start=4)}  # a repeated symbol takes its last id, as there

# the reference's `make_cond_dict` defaults
EMOTION = (0.3077, 0.0256, 0.0256, 0.0256, 0.0256, 0.0256, 0.2564, 0.3077)  # happiness … neutral
FMAX_HZ = 22050.0
PITCH_STD = 20.0
SPEAKING_RATE = 15.0
LANGUAGE = "en-us"
LANGUAGE_ID = 24  # "en-us" in the reference's `supported_language_codes`
SPEAKER_DIM = 128
DEFAULT_VOICE = "default"  # no speaker embedding: the learned unconditional speaker
PHONEMES = "espeak"  # the phoneme conditioner's name, and the prompt tensor of its ids


def phoneme_ids(text: str) -> torch.Tensor:
    """text -> [L] int64: BOS, one id per character (UNK where the table has none), EOS."""
    symbols = unicodedata.normalize("NFKC", text).lower().strip()
    return torch.tensor([BOS_ID, *(_SYMBOL_IDS.get(s, UNK_ID) for s in symbols), EOS_ID], dtype=torch.int64)


def default_conditions() -> dict[str, torch.Tensor]:
    """The conditions besides phonemes and speaker, at the reference's defaults, each [input_dim]."""
    emotion = torch.tensor(EMOTION)
    return {"emotion": emotion / emotion.sum(), "fmax": torch.tensor([FMAX_HZ]),
            "pitch_std": torch.tensor([PITCH_STD]), "speaking_rate": torch.tensor([SPEAKING_RATE]),
            "language_id": torch.tensor([LANGUAGE_ID])}


def make_prompt(text: str, speaker: torch.Tensor | None, num_conditioners: int) -> Prompt:
    """The conditional prefix's inputs: phoneme ids, the speaker (absent: unconditional) and the defaults.
    Its length: the phonemes, then one position per other conditioner."""
    if not text.strip():
        raise ValueError("text must not be empty")
    ids = phoneme_ids(text)
    tensors = {PHONEMES: ids, **default_conditions()}
    if speaker is not None:
        tensors["speaker"] = speaker
    return Prompt(num_tokens=ids.shape[0] + num_conditioners - 1, tensors=tensors)


def resolve_voice(voices: dict[str, torch.Tensor | None], voice: str | None) -> torch.Tensor | None:
    """A voice name -> its speaker embedding [128] (None for the default voice); unknown names are a ValueError."""
    name = DEFAULT_VOICE if voice is None else voice
    if name not in voices:
        raise ValueError(f"unknown voice {quoted(name)}; known voices: {list(voices)}")
    return voices[name]
