"""A voice to clone as the LM lane receives it: what `voice_encoder` made of the reference audio (the router
called it) and, for in-context cloning, `ref_text`, read into the family's `VoiceReference`."""
from __future__ import annotations

import inspect
from typing import Callable

import numpy as np

from backend_python.stub_common.request_inputs import RequestError
from protocol.tensors import REFERENCE_TENSORS


def voice_reference(get: Callable[[str], "np.ndarray | None"]):
    """The request's `VoiceReference` (its tensors on the CPU), or None when it clones no voice."""
    arrays = {name: array for name in REFERENCE_TENSORS if (array := get(name)) is not None}
    text = get("ref_text")
    if not arrays:
        if text is not None:
            raise RequestError("input 'ref_text' came without the reference's tensors: send 'ref_audio' with it",
                               param="ref_text", code="missing_ref_audio")
        return None
    import torch

    from backend_python.models.base import VoiceReference
    return VoiceReference({name: torch.from_numpy(np.array(array)) for name, array in arrays.items()},
                          text=None if text is None else bytes(text.reshape(-1)[0]).decode("utf-8"))


def check_can_clone(model, reference, is_text_open: bool, voice: str | None = None) -> None:
    """Refuse a reference the model cannot use: its family clones no voice, or (a streaming-text session) its
    `open_text` takes no reference; and refuse no reference to a model that has only cloned voices (no preset
    voices: a Base model) when no voice is named either (a named one is the prompt's to refuse: unknown_voice)."""
    if reference is None:
        if model.supports_reference and not model.voices and voice is None:
            raise RequestError("this model has no preset voices: it speaks only a cloned voice; send 'ref_audio' "
                               "(with 'ref_sample_rate', and 'ref_text' or 'x_vector_only')", param="ref_audio",
                               code="missing_ref_audio")
        return
    if not model.supports_reference:
        raise RequestError(f"this model ({type(model).__name__}) cannot take reference audio: it clones no voice; "
                           "send no 'ref_audio'", param="ref_audio", code="reference_unsupported")
    if is_text_open and not takes_reference(model.open_text):
        raise RequestError("this model clones a voice only for a whole text: send the text in one request, or "
                           "no 'ref_audio'", param="ref_audio", code="reference_text_stream_unsupported")


def takes_reference(method) -> bool:
    """Whether a family's `open_text` takes the `reference` keyword (base.py's asks only `voice` of it)."""
    return "reference" in inspect.signature(method).parameters
