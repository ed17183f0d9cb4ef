"""Qwen3-TTS's prompt options (models/base.py PromptOptions, prompt.py): a request's language tags the codec
prefix, its instructions come first as their own text, and a text-first prompt (the reference's
`non_streaming_mode`) holds the whole text, leaving nothing to trail; the tiny preset, random weights. Golden
parity: the same options through the reference's own `generate_custom_voice` on the tiny checkpoint
(tools/make_qwen3_tts_options_fixture.py) give our token ids, prefill, logits and greedy frames."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from backend_python.speechlm_lm.prompt_options import prompt_options
from backend_python.models.base import PromptOptions
from backend_python.models.qwen3_tts import Qwen3TTSLM, preset_config
from backend_python.models.qwen3_tts.lm import spoken_languages
from backend_python.models.qwen3_tts.prompt import (INSTRUCT_IDS, NUM_ROLE_TOKENS, NUM_SUFFIX_TOKENS, instruct_text,
                                                    pad_embedding, prompt_embeddings)
from backend_python.stub_common.request_inputs import RequestError, SpeechRequest
from tests.golden import assert_float32_close
from tests.unit.test_qwen3_tts_lm import embedding_layers

torch.set_flush_denormal(True)
TEXT = "Get the trust fund to the bank early."
CALM = "Speak slowly and calmly."
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "qwen3_tts_tiny"
GOLDEN_OPTIONS = json.loads((FIXTURE / "golden_options.json").read_text())["cases"]


@pytest.fixture(scope="module")
def lm() -> Qwen3TTSLM:
    model = Qwen3TTSLM.from_config(preset_config("qwen3-tts-tiny"), seed=0)
    model.allocate_slots(2, 256)
    return model


def embeddings(lm: Qwen3TTSLM, options: PromptOptions = PromptOptions(), voice: str | None = None):
    """(prompt, prefill [L, H], trailing [N, H]) of TEXT."""
    prompt = lm.encode_prompt(TEXT, voice, options=options)
    prefill, trailing = lm._prompt_embeddings(prompt)
    assert prompt.num_tokens == prefill.shape[0]  # the engine sizes the prefill by it
    return prompt, prefill, trailing


def test_the_model_names_its_languages_and_takes_instructions_and_text_first(lm):
    assert (lm.languages, lm.supports_instructions, lm.supports_text_first) == (("english",), True, True)
    assert lm.takes_prompt_options
    full = preset_config("qwen3-tts-1.7b")  # its languages without building its 1.7B parameters
    assert "beijing_dialect" in full.talker.codec_language_id and "english" in spoken_languages(full)
    assert "beijing_dialect" not in spoken_languages(full)  # a dialect voice's own, under auto


def test_english_adds_its_tag_to_the_codec_prefix_and_auto_leaves_it_out(lm):
    _, auto, _ = embeddings(lm)
    prompt, english, trailing = embeddings(lm, PromptOptions(language="english"))
    assert english.shape[0] == auto.shape[0] + 1  # think, think_bos, english, think_eos instead of three tags
    assert int(prompt.tensors["language_id"]) == lm.config.talker.codec_language_id["english"]
    assert torch.equal(trailing, embeddings(lm)[2])
    assert torch.equal(embeddings(lm, PromptOptions(language=None))[1], auto)  # None: the model's own (auto)


def test_instructions_come_first_as_a_user_turn_and_leave_the_rest_as_it_was(lm):
    _, plain, trailing = embeddings(lm)
    prompt, instructed, instructed_trailing = embeddings(lm, PromptOptions(instructions=CALM))
    ids = lm.tokenizer(instruct_text(CALM))["input_ids"]
    assert prompt.tensors["instruct_ids"].tolist() == ids
    assert instructed.shape[0] == len(ids) + plain.shape[0]
    assert torch.equal(instructed[:len(ids)], lm.talker.embed_text(torch.tensor(ids)))
    assert torch.equal(instructed[len(ids):], plain)
    assert torch.equal(instructed_trailing, trailing)


def test_a_text_first_prompt_holds_the_whole_text_over_codec_pad_and_nothing_trails(lm):
    plain_prompt, plain, trailing = embeddings(lm)
    prompt, text_first, rest = embeddings(lm, PromptOptions(is_text_first=True))
    num_text = len(plain_prompt.tensors["text_ids"]) - NUM_ROLE_TOKENS - NUM_SUFFIX_TOKENS  # t0..tn
    head = plain.shape[0] - 1  # role and tag positions: the same
    assert rest.shape[0] == 0 and text_first.shape[0] == head + num_text + 1 + 1
    assert torch.equal(text_first[:head], plain[:head])
    t = lm.config.talker
    codec_pad, codec_bos = lm.talker.embed_codec(torch.tensor([t.codec_pad_id, t.codec_bos_id]))
    tts_pad = lm.talker.embed_text(torch.tensor([lm.config.tts_pad_token_id]))[0]
    t0 = lm.talker.embed_text(plain_prompt.tensors["text_ids"][NUM_ROLE_TOKENS:NUM_ROLE_TOKENS + 1])[0]
    torch.testing.assert_close(text_first[head], t0 + codec_pad)  # the text over codec_pad, t0 first
    torch.testing.assert_close(text_first[head + 1:head + num_text + 1], trailing + codec_pad)  # .. tn, tts_eos
    torch.testing.assert_close(text_first[-1], tts_pad + codec_bos)  # then tts_pad over codec_bos


def test_a_text_first_prompt_decodes_frames(lm):
    from tests.unit.test_qwen3_tts_lm import GREEDY, batch, logit_layers

    lm.prefill(0, lm.encode_prompt(TEXT, None, options=PromptOptions(is_text_first=True)))
    frames = torch.cat([lm.decode(batch([0], [GREEDY]))[0] for _ in range(4)])
    assert frames.shape == (4, lm.num_codebooks)
    lm.release(0)


def test_a_streamed_text_with_instructions_prefills_as_the_whole_text(lm):
    options = PromptOptions(language="english", instructions=CALM)
    feed = lm.open_text(None, options=options)
    for word in TEXT.split(" "):
        feed.append(word + " ")
    feed.close()
    streamed = feed.prompt()
    whole = lm.encode_prompt(TEXT, None, options=options)
    assert feed.num_prompt_tokens == streamed.num_tokens == whole.num_tokens
    assert torch.equal(lm._prompt_embeddings(streamed)[0], lm._prompt_embeddings(whole)[0])


def test_what_the_model_cannot_take_is_refused(lm):
    with pytest.raises(ValueError, match="whole text"):
        lm.open_text(None, options=PromptOptions(is_text_first=True))
    with torch.device("meta"):
        small = Qwen3TTSLM(preset_config("qwen3-tts-0.6b"), tokenizer=None)
        base = Qwen3TTSLM(preset_config("qwen3-tts-tiny-base"), tokenizer=None)
    assert not small.supports_instructions and not base.supports_instructions  # as the reference: no instruct


@pytest.mark.parametrize("preset", ["qwen3-tts-0.6b", "qwen3-tts-tiny-base"])
def test_instructions_to_a_model_without_them_are_refused_by_name_before_any_prompt(preset):
    """One check, the LM lane's: a Base model (every cloned voice) and the 0.6B declare no instructions, and the
    family's prompt builders take what reaches them as allowed."""
    with torch.device("meta"):
        model = Qwen3TTSLM(preset_config(preset), tokenizer=None)
    request = SpeechRequest(text=TEXT, voice=None, temperature=0.9, top_p=1.0, top_k=50, repetition_penalty=1.05,
                            seed=None, max_audio_seconds=5.0, ignore_eos=False, instructions=CALM)
    with pytest.raises(RequestError, match=r"\(Qwen3TTSLM\) takes no instructions") as info:
        prompt_options(model, request)
    assert (info.value.param, info.value.code) == ("instructions", "instructions_unsupported")


# ---- golden parity with qwen-tts 0.1.1's generate_custom_voice (tools/make_qwen3_tts_options_fixture.py) ----
def golden_options(case: int) -> tuple[dict, dict]:
    meta, golden = GOLDEN_OPTIONS[case], np.load(FIXTURE / "golden_options.npz")
    return meta, {key.rsplit("_", 1)[0]: golden[key] for key in golden.files if key.endswith(f"_{case}")}


def options_of(meta: dict) -> PromptOptions:
    """The request's fields as the LM lane hands them over: the reference's `instruct`, `non_streaming_mode`."""
    return PromptOptions(language=meta["language"], instructions=meta["instructions"],
                         is_text_first=meta["non_streaming_mode"])


@pytest.mark.parametrize("case", range(len(GOLDEN_OPTIONS)))
def test_golden_instructions_and_non_streaming_mode_build_the_reference_s_prompt(case):
    """The ids and embeddings the reference builds for instruct and non_streaming_mode. Where the reference trails
    only tts_pad (non_streaming_mode), ours trails nothing: both then add tts_pad to every frame."""
    meta, golden = golden_options(case)
    lm = Qwen3TTSLM.from_pretrained(FIXTURE)
    prompt = lm.encode_prompt(meta["text"], meta["voice"], options=options_of(meta))
    assert prompt.tensors["text_ids"].tolist() == golden["input_ids"].tolist()
    instruct_ids = prompt.tensors.get(INSTRUCT_IDS, torch.zeros(0, dtype=torch.int64))
    assert instruct_ids.tolist() == golden["instruct_ids"].tolist()
    prefill, trailing = prompt_embeddings(lm.config, lm.talker, prompt, lm.device)
    assert prompt.num_tokens == prefill.shape[0] == golden["prefill_embeds"].shape[0]
    assert_float32_close(prefill, torch.from_numpy(golden["prefill_embeds"]), embedding_layers(lm))
    pad = pad_embedding(lm.config, lm.talker, lm.device)
    padded = torch.cat((trailing, pad.expand(len(golden["trailing"]) - len(trailing), -1)))
    assert_float32_close(padded, torch.from_numpy(golden["trailing"]), embedding_layers(lm))


@pytest.mark.parametrize("case", range(len(GOLDEN_OPTIONS)))
def test_golden_instructions_and_non_streaming_mode_decode_the_reference_s_frames(case):
    from tests.unit.test_qwen3_tts_lm import GREEDY, batch, logit_layers

    meta, golden = golden_options(case)
    lm = Qwen3TTSLM.from_pretrained(FIXTURE)
    lm.allocate_slots(2, 96)
    lm.prefill(1, lm.encode_prompt(meta["text"], meta["voice"], options=options_of(meta)))
    logits, codes = golden["logits"], golden["codes"]  # [T+1, V], [T, 16]
    assert_float32_close(lm._memory.logits[1], torch.from_numpy(logits[0]), logit_layers(lm))
    for t in range(codes.shape[0]):
        frame, _ = lm.decode(batch([1], [GREEDY], ignore_eos=[False]))
        assert frame[0].tolist() == codes[t].tolist(), f"frame {t}"
        assert_float32_close(lm._memory.logits[1], torch.from_numpy(logits[t + 1]), logit_layers(lm), f"frame {t}")
