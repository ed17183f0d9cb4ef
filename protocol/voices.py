"""The rule for a registered voice's name, the same for `voice_registry`, the gateway and every client; and what a
voice of the served model holds (`VoiceSpec`)."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

import numpy as np

from protocol.errors import RequestError
from protocol.quoting import quoted

MAX_NAME_CHARS = 64
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,%d}" % (MAX_NAME_CHARS - 1))


def check_name(name: str, presets: tuple[str, ...] = ()) -> str:
    """`name` if a voice may be registered under it; else a RequestError (`param=name`)."""
    if not NAME_PATTERN.fullmatch(name):
        raise RequestError(f"voice name {quoted(name)} is not valid: 1 to {MAX_NAME_CHARS} characters, letters, "
                           "digits, '_', '.' and '-', starting with a letter or digit", param="name",
                           code="bad_voice_name")
    if name.lower() in {preset.lower() for preset in presets}:  # a model may take its voices in any case
        raise RequestError(f"voice name {quoted(name)} is a preset voice of this model ({', '.join(presets)}): "
                           "choose another name", param="name", code="preset_voice_name")
    return name


@dataclass(frozen=True)
class VoiceSpec:
    """What the served model's voices hold, as its voice encoder makes them: each reference tensor's shape (-1: any
    number of frames), the codes' exclusive bound per codebook (`ref_codes`' last axis; () where it has no codes),
    and whether an in-context voice needs its transcript. The registry checks a voice against it before it stores
    or imports one: a voice the model cannot use would fail every request that names it."""

    shapes: dict[str, tuple[int, ...]]
    code_limits: tuple[int, ...] = ()
    needs_transcript: bool = True

    def check(self, tensors: dict[str, np.ndarray], transcript: str | None, x_vector_only: bool,
              param: str) -> None:
        """Refuse (RequestError naming `param`, code `voice_mismatch`) a voice this model cannot speak."""
        unknown = sorted(set(tensors) - set(self.shapes))
        if unknown:
            raise _mismatch(f"it holds {unknown[0]}, which this model's voices never hold", param)
        for name, shape in self.shapes.items():
            if name in tensors:
                self._check_tensor(name, tensors[name], shape, param)
            elif not x_vector_only or -1 not in shape:  # an x-vector voice leaves out only the frames
                raise _mismatch(f"it lacks {name}, which this model's {_kind(x_vector_only)} voices hold", param)
        if not x_vector_only and self.needs_transcript and not transcript:
            raise RequestError("an in-context voice of this model needs its transcript", param=param,
                               code="missing_ref_text")

    def _check_tensor(self, name: str, array: np.ndarray, shape: tuple[int, ...], param: str) -> None:
        if array.ndim != len(shape) or any(want not in (-1, got) for want, got in zip(shape, array.shape)) \
                or 0 in array.shape:
            raise _mismatch(f"its {name} has shape {list(array.shape)}; this model's is "
                            f"{['frames' if n == -1 else n for n in shape]}", param)
        if name == "ref_codes" and self.code_limits:
            low, high = array.min(axis=0), array.max(axis=0)
            for codebook, (least, most, limit) in enumerate(zip(low, high, self.code_limits)):
                if least < 0 or most >= limit:
                    raise _mismatch(f"its ref_codes of codebook {codebook} lie in [{least}, {most}]; this model's "
                                    f"codes are 0 to {limit - 1}", param)

    def to_json(self) -> str:
        return json.dumps({"shapes": self.shapes, "code_limits": self.code_limits,
                           "needs_transcript": self.needs_transcript})

    @classmethod
    def from_json(cls, text: str) -> "VoiceSpec":
        fields = json.loads(text)
        return cls({name: tuple(shape) for name, shape in fields["shapes"].items()}, tuple(fields["code_limits"]),
                   bool(fields["needs_transcript"]))


def _kind(x_vector_only: bool) -> str:
    return "x-vector" if x_vector_only else "in-context"


def _mismatch(message: str, param: str) -> RequestError:
    return RequestError(f"the voice does not fit this model: {message}", param=param, code="voice_mismatch")
