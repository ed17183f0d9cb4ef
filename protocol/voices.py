"""The rule for a registered voice's name, the same for `voice_registry`, the gateway and every client."""
from __future__ import annotations

import re

from protocol.errors import RequestError
from protocol.quoting import quoted

NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def check_name(name: str, presets: tuple[str, ...] = ()) -> str:
    """`name` if a voice may be registered under it; else a RequestError (`param=name`)."""
    if not NAME_PATTERN.fullmatch(name):
        raise RequestError(f"voice name {quoted(name)} is not valid: 1 to 64 characters, letters, digits, '_', '.' "
                           "and '-', starting with a letter or digit", param="name", code="bad_voice_name")
    if name.lower() in {preset.lower() for preset in presets}:  # a model may take its voices in any case (Qwen3-TTS)
        raise RequestError(f"voice name {quoted(name)} is a preset voice of this model ({', '.join(presets)}): "
                           "choose another name", param="name", code="preset_voice_name")
    return name
