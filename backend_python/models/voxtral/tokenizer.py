"""Voxtral-TTS's text tokenizer: Mistral's Tekken (`tekken.json`).

Tekken reserves its first `default_num_special_tokens` ids (1000) for specials, then its byte-level BPE ranks:
rank r is id 1000 + r, ranks 0..255 the single bytes. A `tekken.json` with those 256 ranks only (the tiny
preset's) is Tekken with no merges, and is read here: a text's ids are 1000 + each UTF-8 byte. A full Tekken
vocabulary (the official checkpoint's) needs Mistral's `mistral-common` package to merge; without it the load
fails with an error that says so.
"""
from __future__ import annotations

import base64
import json
from pathlib import Path

TEKKEN_FILE = "tekken.json"
NUM_SPECIAL_TOKENS = 1000
# the speech request's specials (mistral_common's Tekken: ids 0.. in this order; the rest are reserved)
SPECIALS = {0: "<unk>", 1: "<s>", 2: "</s>", 24: "[AUDIO]", 25: "[BEGIN_AUDIO]", 35: "[REPEAT_AUDIO_TEXT]",
            36: "[NEXT_AUDIO_TEXT]"}


class ByteTekken:
    """Tekken with its 256 byte ranks and no merges."""

    num_special_tokens = NUM_SPECIAL_TOKENS

    def encode(self, text: str) -> list[int]:
        return [self.num_special_tokens + b for b in text.encode("utf-8")]

    def __len__(self) -> int:
        return self.num_special_tokens + 256


class MistralCommonTekken:
    """A full Tekken vocabulary through mistral-common."""

    def __init__(self, path: Path) -> None:
        try:
            from mistral_common.tokens.tokenizers.tekken import Tekkenizer
        except ImportError:
            raise RuntimeError(f"{path} is a full Tekken vocabulary: reading it needs the `mistral-common` package "
                               f"(pip install mistral-common)") from None
        self._tekken = Tekkenizer.from_file(str(path))
        self.num_special_tokens = self._tekken.num_special_tokens

    def encode(self, text: str) -> list[int]:
        return self._tekken.encode(text, bos=False, eos=False)

    def __len__(self) -> int:
        return self._tekken.n_words


def byte_tekken_json() -> dict:
    """The tiny preset's `tekken.json`: Tekken's layout with the byte ranks only."""
    vocab = [{"rank": b, "token_bytes": base64.b64encode(bytes([b])).decode(), "token_str": None} for b in range(256)]
    specials = [{"rank": i, "token_str": SPECIALS.get(i, f"<SPECIAL_{i}>"), "is_control": True}
                for i in range(NUM_SPECIAL_TOKENS)]
    return {"config": {"pattern": "", "num_vocab_tokens": NUM_SPECIAL_TOKENS + 256,
                       "default_vocab_size": NUM_SPECIAL_TOKENS + 256,
                       "default_num_special_tokens": NUM_SPECIAL_TOKENS, "version": "v7"},
            "vocab": vocab, "special_tokens": specials}


def load_tokenizer(path: str | Path):
    file = Path(path) / TEKKEN_FILE
    if not file.is_file():
        raise FileNotFoundError(f"no {TEKKEN_FILE} in {path}")
    data = json.loads(file.read_text())
    num_special = data.get("config", {}).get("default_num_special_tokens", NUM_SPECIAL_TOKENS)
    ranks = data.get("vocab", [])
    if num_special == NUM_SPECIAL_TOKENS and len(ranks) == 256 and all(
            base64.b64decode(r["token_bytes"]) == bytes([r["rank"]]) for r in ranks):
        return ByteTekken()
    return MistralCommonTekken(file)
