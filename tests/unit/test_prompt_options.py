"""The LM lane's check of a request's prompt options against what its family declares (speechlm_lm/prompt_options.py):
each refusal names its input and the allowed values; a family that takes no options is passed none."""
from __future__ import annotations

from dataclasses import replace

import pytest

from backend_python.speechlm_lm.prompt_options import option_kwargs, prompt_options
from backend_python.models.base import PromptOptions, SpeechLM
from backend_python.stub_common.request_inputs import RequestError, SpeechRequest

REQUEST = SpeechRequest(text="Hi.", voice=None, temperature=0.9, top_p=1.0, top_k=50, repetition_penalty=1.05,
                        seed=None, max_audio_seconds=5.0, ignore_eos=False)


class Declared:
    """A family's declarations alone (the check reads nothing else), as SpeechLM spells them."""

    def __init__(self, languages=(), instructions=False, text_first=False, takes=False):
        self.languages, self.supports_instructions = languages, instructions
        self.supports_text_first, self.takes_prompt_options = text_first, takes


QWEN = Declared(("english", "chinese"), instructions=True, text_first=True, takes=True)
ENGLISH_ONLY = Declared(("english",))  # takes no language: it speaks English


def test_the_declarations_default_to_none_on_every_family():
    assert (SpeechLM.languages, SpeechLM.supports_instructions, SpeechLM.supports_text_first,
            SpeechLM.takes_prompt_options) == ((), False, False, False)


def test_what_the_family_takes_becomes_its_options():
    request = replace(REQUEST, language="chinese", instructions="Calm.", non_streaming_mode=True)
    options = prompt_options(QWEN, request)
    assert options == PromptOptions("chinese", "Calm.", True)
    assert option_kwargs(QWEN, options) == {"options": options}


def test_language_is_compared_case_insensitively_and_reaches_the_family_in_lowercase():
    assert prompt_options(QWEN, replace(REQUEST, language="Chinese")).language == "chinese"
    assert prompt_options(QWEN, replace(REQUEST, language="AUTO")).language == "auto"


def test_a_refused_language_is_echoed_as_the_client_spelled_it():
    with pytest.raises(RequestError, match="language 'Klingon' is not one of") as info:
        prompt_options(QWEN, replace(REQUEST, language="Klingon"))
    assert info.value.param == "language"


@pytest.mark.parametrize("language", [None, "auto", "english", "English"])
def test_a_family_that_takes_no_options_gets_none_for_auto_or_its_own_language(language):
    options = prompt_options(ENGLISH_ONLY, replace(REQUEST, language=language))
    assert option_kwargs(ENGLISH_ONLY, options) == {}


@pytest.mark.parametrize("model, fields, param, message", [
    (QWEN, dict(language="french"), "language", "auto, english, chinese"),
    (ENGLISH_ONLY, dict(language="chinese"), "language", "auto, english"),
    (Declared(), dict(language="english"), "language", "one of this model's: auto "),
    (ENGLISH_ONLY, dict(instructions="Calm."), "instructions", "takes no instructions"),
    (ENGLISH_ONLY, dict(non_streaming_mode=True), "non_streaming_mode", "no non-streaming prompt"),
    (QWEN, dict(non_streaming_mode=True, is_text_open=True), "non_streaming_mode", "streaming-text session"),
])
def test_what_the_family_cannot_take_is_refused_by_name(model, fields, param, message):
    with pytest.raises(RequestError, match=message) as info:
        prompt_options(model, replace(REQUEST, **fields))
    assert info.value.param == param
