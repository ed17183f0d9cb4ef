"""A request's prompt options (`language`, `instructions`, `non_streaming_mode`) checked against what its
model's family declares (models/base.py `PromptOptions`), each refusal naming its input and the allowed values."""
from __future__ import annotations

from backend_python.stub_common.request_inputs import RequestError, SpeechRequest


def prompt_options(model, req: SpeechRequest):
    """The request's `PromptOptions` for `model`; raises RequestError naming the first it cannot take."""
    from backend_python.models.base import PromptOptions

    language = _check_language(model, req.language)
    _check_instructions(model, req.instructions)
    _check_text_first(model, req.non_streaming_mode, req.is_text_open)
    return PromptOptions(language, req.instructions, req.non_streaming_mode)


def option_kwargs(model, options) -> dict:
    """The keyword a family's prompt calls take, for a family that takes prompt options (none otherwise:
    its checked options change nothing)."""
    return {"options": options} if model.takes_prompt_options else {}


def _check_language(model, language: str | None) -> str | None:
    """`language` lowercase, as the family names its languages ("English" is "english"); the refusal echoes
    the client's own spelling."""
    from backend_python.models.base import AUTO_LANGUAGE

    allowed = (AUTO_LANGUAGE, *model.languages)
    lowered = None if language is None else language.lower()
    if lowered is not None and lowered not in allowed:
        raise RequestError(f"language {language!r} is not one of this model's: {', '.join(allowed)} "
                           "(case-insensitive)", param="language", code="unsupported_language")
    return lowered


def _check_instructions(model, instructions: str) -> None:
    if instructions and not model.supports_instructions:
        raise RequestError(f"this model ({type(model).__name__}) takes no instructions: send none, or an "
                           "empty string", param="instructions", code="instructions_unsupported")


def _check_text_first(model, is_text_first: bool, is_text_open: bool) -> None:
    if not is_text_first:
        return
    if is_text_open:
        raise RequestError("non_streaming_mode puts the whole text in the prompt: a streaming-text session "
                           "does not have it; send false", param="non_streaming_mode", code="unsupported_value")
    if not model.supports_text_first:
        raise RequestError(f"this model ({type(model).__name__}) has no non-streaming prompt: send false",
                           param="non_streaming_mode", code="unsupported_value")
