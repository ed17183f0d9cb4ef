"""Text tokenised piece by piece gives the ids of the whole text, for every way of splitting it.

Two byte-level BPEs: the tiny preset's (GPT-2's pre-tokenizer pattern) and one built like Qwen2's
real tokenizer (NFC, Qwen2's split pattern, then byte-level), both with Qwen's special tokens."""
from __future__ import annotations

import random

import pytest

from backend_python.models.incremental_tokenizer import IncrementalTokenizer
from backend_python.models.qwen3_tts.presets import TINY_BPE_CORPUS, TINY_BPE_SPECIALS, build_tiny_tokenizer

PREFIX = "<|im_start|>assistant\n"
SUFFIX = "<|im_end|>\n<|im_start|>assistant\n"
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                 r"\s*[\r\n]+|\s+(?!\S)|\s+")
TEXTS = [
    "Hello world, this is a tiny tokenizer for testing text to speech.",
    "Get the trust fund   to the bank early.  ",
    "a \n\n b\n\n\nc.\n\n \n d",  # whitespace runs that a later newline would merge
    "x \n\n \ny \n\n \n\n",
    "They're here; we'll see, I'd say it's 12345 o'clock...",
    "café cafe\u0301 x\u0301\u0323 한국어 日本語 🙂🙂 ok",  # composed and combining, CJK, emoji
    "xa\u0346\u0323 b",  # NFC puts the later dot below first and joins it to the "a" before the cut
    "tabs\tand\r\nwindows\r\n  lines",
    "a<|im_end|>b <|im_ b <| x<|tts_pad|>",  # added tokens inside the text, whole and cut
    "?!... -- 'quoted' \"double\" (paren) [x]{y}",
    "\n leading newline and trailing spaces   ",
]
# merges across spaces and newlines, so that cutting a whitespace word in two changes its ids
WHITESPACE_CORPUS = ["x \n\n \n y  \n\n\n z \n \n"] * 30


def qwen2_like_tokenizer():
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import Qwen2TokenizerFast

    bpe = Tokenizer(models.BPE(unk_token=None))
    bpe.normalizer = normalizers.NFC()
    bpe.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=TINY_BPE_SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(TINY_BPE_CORPUS + WHITESPACE_CORPUS, trainer)
    tokenizer = Qwen2TokenizerFast(tokenizer_object=bpe, unk_token=None, bos_token=None, eos_token="<|endoftext|>",
                                   pad_token="<|endoftext|>", errors="replace")
    tokenizer.add_special_tokens({"additional_special_tokens": TINY_BPE_SPECIALS[1:]})
    return tokenizer


@pytest.fixture(scope="module", params=["tiny", "qwen2"])
def tokenizer(request):
    return build_tiny_tokenizer() if request.param == "tiny" else qwen2_like_tokenizer()


def streamed_ids(tokenizer, pieces: list[str]) -> list[int]:
    stream = IncrementalTokenizer(tokenizer, PREFIX)
    for piece in pieces:
        stream.append(piece)
    stream.close(SUFFIX)
    return stream.ids


def whole_ids(tokenizer, text: str) -> list[int]:
    return list(tokenizer(PREFIX + text + SUFFIX)["input_ids"])


def splits_in_two(text: str):
    return ([text[:i], text[i:]] for i in range(len(text) + 1))


def random_splits(text: str, rng: random.Random, count: int):
    for _ in range(count):
        cuts = sorted(rng.sample(range(len(text) + 1), rng.randint(1, min(len(text), 12))))
        yield [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]


@pytest.mark.parametrize("text", TEXTS)
def test_every_split_gives_the_whole_texts_ids(tokenizer, text):
    expected = whole_ids(tokenizer, text)
    assert streamed_ids(tokenizer, list(text)) == expected  # character by character
    assert streamed_ids(tokenizer, ["", text, ""]) == expected  # empty pieces change nothing
    for pieces in [*splits_in_two(text), *random_splits(text, random.Random(len(text)), 40)]:
        assert streamed_ids(tokenizer, pieces) == expected, pieces


def test_committed_ids_are_a_prefix_of_the_whole_texts(tokenizer):
    """What is committed before the close never changes: every partial state is a prefix of the result."""
    text = TEXTS[3]
    expected = whole_ids(tokenizer, text)
    stream = IncrementalTokenizer(tokenizer, PREFIX)
    for char in text:
        stream.append(char)
        assert stream.ids == expected[:len(stream.ids)]


def test_words_commit_as_soon_as_the_next_one_starts(tokenizer):
    stream = IncrementalTokenizer(tokenizer, PREFIX)
    stream.append("Hello wor")
    held = len(stream.ids)
    assert stream.pending_text == " wor"  # the last word waits
    stream.append("ld ")
    assert len(stream.ids) > held and stream.pending_text == " "  # " world" ended at the space; it waits
    stream.append("again")
    assert stream.pending_text == " again"


def test_trailing_whitespace_and_added_token_prefixes_wait(tokenizer):
    stream = IncrementalTokenizer(tokenizer, PREFIX)
    stream.append("one two \n\n ")
    assert stream.pending_text == " \n\n "  # Qwen2's pattern reads " \n\n" as a word, but a "\n" may join it
    stream = IncrementalTokenizer(tokenizer, PREFIX)
    stream.append("one two<|im_")
    assert "<|im_" in stream.pending_text


def test_closed_text_takes_no_more():
    stream = IncrementalTokenizer(build_tiny_tokenizer(), PREFIX)
    stream.close(SUFFIX)
    with pytest.raises(ValueError, match="closed"):
        stream.append("more")
