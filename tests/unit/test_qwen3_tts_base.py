"""Qwen3-TTS Base (voice cloning) against the reference qwen-tts 0.1.1 (tools/make_qwen3_tts_base_fixture.py):
the speaker embedding and the codec encoder's codes for a fixed waveform, the prompt of each cloning mode
(x-vector only, in context) and its greedy frames, all on the fixture's tiny random weights."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from backend_python.models import registry
from backend_python.models.base import DecodeBatch, SamplingParams, VoiceReference
from backend_python.models.qwen3_tts import Qwen3TTSLM, preset_config
from backend_python.models.qwen3_tts.prompt import prompt_embeddings
from backend_python.models.qwen3_tts.voice_encoder import Qwen3TTSVoiceEncoder
from tests.golden import assert_float32_close, num_layers
from tests.unit.test_qwen3_tts_lm import embedding_layers

torch.set_flush_denormal(True)
torch.set_num_threads(1)

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "qwen3_tts_tiny_base"
META = json.loads((FIXTURE / "golden.json").read_text())
CASES = list(enumerate(META["cases"]))
MEL_LAYERS = 2  # the speaker encoder's front end: the FFT's sums and the mel filterbank's
GREEDY = SamplingParams(temperature=0.0, repetition_penalty=META["repetition_penalty"])


@pytest.fixture(scope="module")
def golden():
    return {k: torch.from_numpy(v) for k, v in np.load(FIXTURE / "golden.npz").items()}


@pytest.fixture(scope="module")
def voice_encoder() -> Qwen3TTSVoiceEncoder:
    return Qwen3TTSVoiceEncoder.from_pretrained(FIXTURE)


def lm_for(language: str) -> Qwen3TTSLM:
    return Qwen3TTSLM.from_pretrained(FIXTURE, language=language)


def reference_of(golden, case: dict) -> VoiceReference:
    tensors = {"speaker_embedding": golden["speaker_embedding"]}
    if case["ref_text"] is not None:
        tensors["ref_codes"] = golden["ref_codes"]
    return VoiceReference(tensors, case["ref_text"])


def test_speaker_embedding_matches_reference(voice_encoder, golden):
    [out] = voice_encoder.encode([golden["waveform"]], [True])
    assert out.keys() == {"speaker_embedding"}  # x-vector only: no codes
    assert out["speaker_embedding"].dtype == torch.float32
    assert_float32_close(out["speaker_embedding"], golden["speaker_embedding"],
                         num_layers(voice_encoder.speaker_encoder) + MEL_LAYERS)


def test_codec_encoder_codes_equal_reference(voice_encoder, golden):
    [out] = voice_encoder.encode([golden["waveform"]], [False])
    assert out["ref_codes"].dtype == torch.int64 and out["ref_codes"].shape == golden["ref_codes"].shape == (9, 16)
    assert torch.equal(out["ref_codes"], golden["ref_codes"])


def test_a_batch_encodes_each_request_as_alone(voice_encoder, golden):
    wav = golden["waveform"]
    batch = voice_encoder.encode([wav[:7000], wav], [False, False])
    alone = voice_encoder.encode([wav[:7000]], [False])[0]
    assert torch.equal(batch[0]["ref_codes"], alone["ref_codes"]) and batch[0]["ref_codes"].shape[0] == 4  # ceil(7000/1920)
    assert torch.equal(batch[0]["speaker_embedding"], alone["speaker_embedding"])
    assert torch.equal(batch[1]["ref_codes"], golden["ref_codes"])


def test_input_chunks_are_coded_batched_as_each_alone_without_the_speaker_encoder(voice_encoder, golden, monkeypatch):
    """`encode_codes` (an audio-in stream's input chunks) runs the codec encoder once per length, batched, with
    the codes `encode` gives each chunk alone, and never the speaker network."""
    wav = golden["waveform"]
    rng = torch.Generator().manual_seed(0)
    noise = (torch.rand(3 * 7680, generator=rng) - 0.5) * 0.6
    chunks = [wav[:7680], noise[:7680], wav[:3000], noise[7680:15360], noise[-5000:]]
    alone = [voice_encoder.encode([c], [False])[0]["ref_codes"] for c in chunks]
    calls = []
    codec_forward = voice_encoder.encoder.forward
    monkeypatch.setattr(voice_encoder.encoder, "forward", lambda audio: calls.append(tuple(audio.shape)) or
                        codec_forward(audio))
    monkeypatch.setattr(voice_encoder, "speaker_embedding", lambda audio: pytest.fail("the speaker encoder ran"))
    coded = voice_encoder.encode_codes(chunks)
    assert sorted(calls) == [(1, 3000), (1, 5000), (3, 7680)]  # one call per length: the three 4-frame chunks at once
    for got, expected in zip(coded, alone):
        assert got.dtype == torch.int64 and torch.equal(got, expected)


def test_reference_tensors_declare_what_encode_returns(voice_encoder, golden):
    [out] = voice_encoder.encode([golden["waveform"]], [False])
    assert voice_encoder.sample_rate == 24000
    for name, (dtype, shape) in voice_encoder.reference_tensors.items():
        assert dtype in ("FP32", "INT32") and len(shape) == out[name].dim()
        assert all(d in (-1, n) for d, n in zip(shape, out[name].shape))


@pytest.mark.parametrize("index, case", CASES, ids=["x-vector", "icl", "icl-padded"])
def test_prompt_embeddings_match_reference(golden, index, case):
    lm = lm_for(case["language"])
    prompt = lm.encode_prompt(case["text"], None, reference_of(golden, case))
    assert prompt.tensors["text_ids"].tolist() == golden[f"input_ids_{index}"].tolist()
    prefill, trailing = prompt_embeddings(lm.config, lm.talker, prompt, torch.device("cpu"))
    assert prompt.num_tokens == prefill.shape[0]
    assert_float32_close(prefill, golden[f"prefill_embeds_{index}"], embedding_layers(lm))
    expected = golden[f"trailing_{index}"]
    if index == 2:  # text shorter than the reference: the reference trails tts_pad alone, we trail nothing
        pad = lm.talker.embed_text(torch.tensor([lm.config.tts_pad_token_id]))
        assert_float32_close(pad, expected, embedding_layers(lm))
        expected = expected[:0]
    assert_float32_close(trailing, expected, embedding_layers(lm))


@pytest.mark.parametrize("index, case", CASES, ids=["x-vector", "icl", "icl-padded"])
def test_greedy_frames_equal_reference(golden, index, case):
    lm = lm_for(case["language"])
    lm.allocate_slots(1, 128)
    lm.prefill(0, lm.encode_prompt(case["text"], None, reference_of(golden, case)))
    batch = DecodeBatch([0], [GREEDY], [torch.Generator().manual_seed(0)], [True])
    expected = golden[f"codes_{index}"]
    codes = torch.cat([lm.decode(batch)[0] for _ in range(expected.shape[0])])
    assert torch.equal(codes, expected)


def test_the_reference_changes_the_prompt(golden):
    lm, case = lm_for("auto"), META["cases"][0]
    reference = reference_of(golden, case)
    other = VoiceReference({"speaker_embedding": reference.tensors["speaker_embedding"] + 1.0})
    embeds = [prompt_embeddings(lm.config, lm.talker, lm.encode_prompt(case["text"], None, r), torch.device("cpu"))[0]
              for r in (reference, other)]
    assert not torch.allclose(*embeds)


def test_a_base_model_has_no_voices_and_needs_a_reference(golden):
    lm = lm_for("auto")
    assert lm.voices == () and lm.supports_reference
    with pytest.raises(ValueError, match="needs reference audio"):
        lm.encode_prompt("Hello.", None)
    with pytest.raises(ValueError, match="no preset voices"):
        lm.encode_prompt("Hello.", "tiny", reference_of(golden, META["cases"][0]))
    with pytest.raises(ValueError, match="transcript"):
        lm.encode_prompt("Hello.", None, VoiceReference(reference_of(golden, META["cases"][1]).tensors, None))
    with pytest.raises(ValueError, match="speaker embedding must be"):
        lm.encode_prompt("Hello.", None, VoiceReference({"speaker_embedding": torch.zeros(5)}))
    with pytest.raises(ValueError, match="needs reference audio"):
        lm.open_text(None)
    with pytest.raises(ValueError, match="x_vector_only"):  # in context needs the whole text in the prompt
        lm.open_text(None, reference_of(golden, META["cases"][1]))


def test_a_streamed_text_clones_the_x_vector_voice_as_the_whole_text_does(golden):
    """x-vector cloning in a streaming-text session: the same frames as the whole text with the same reference."""
    from backend_python.engine.sequence import Sequence
    from tests.unit.test_engine import ListSink, StepClock
    from tests.unit.test_engine_backpressure import engine_with_clock, steps

    lm, reference, text = lm_for("auto"), reference_of(golden, META["cases"][0]), "Get the trust fund to the bank."

    def request(name: str, prompt, feed) -> ListSink:
        sink = ListSink()
        engine.add(Sequence(request_id=name, prompt=prompt, sampling=SamplingParams(), ignore_eos=True,
                            max_frames=16, sink=sink, generator=torch.Generator().manual_seed(5), text=feed))
        return sink

    engine = engine_with_clock(lm, StepClock())
    whole = request("whole", lm.encode_prompt(text, None, reference), None)
    streamed = request("streamed", None, lm.open_text(None, reference))
    for i, word in enumerate(text.split(" ")):
        engine.add_text("streamed", word if i == 0 else " " + word, is_final=False)
        steps(engine, 3)
    engine.add_text("streamed", "", is_final=True)
    steps(engine, 40)
    assert whole.error is None and streamed.error is None
    frames = [torch.cat([c.tokens[c.context_frames:] for c in sink.chunks]) for sink in (whole, streamed)]
    assert frames[0].shape[0] == 16 and torch.equal(frames[0], frames[1])


def test_a_streamed_texts_prefill_holds_the_cloned_speaker(golden):
    """The tiny model's frames hardly move with the speaker: its prefill shows where the embedding went."""
    from backend_python.models.qwen3_tts.prompt import prefill_embeddings

    lm, reference = lm_for("auto"), reference_of(golden, META["cases"][0])

    def prefill_of(voice: VoiceReference) -> torch.Tensor:
        feed = lm.open_text(None, voice)
        feed.append("Get the")  # the first text token is final
        return prefill_embeddings(lm.config, lm.talker, feed.prompt(), torch.device("cpu"))

    whole = prefill_embeddings(lm.config, lm.talker, lm.encode_prompt("Get the trust fund.", None, reference),
                               torch.device("cpu"))
    torch.testing.assert_close(prefill_of(reference), whole, rtol=0, atol=0)
    other = prefill_of(VoiceReference({"speaker_embedding": -golden["speaker_embedding"]}))
    assert not torch.equal(other, whole)


def test_a_custom_voice_model_rejects_a_reference():
    lm = Qwen3TTSLM.from_config(preset_config("qwen3-tts-tiny"))
    assert not lm.supports_reference and lm.voices
    with pytest.raises(ValueError, match="cannot clone a voice"):
        lm.encode_prompt("Hello.", None, VoiceReference({"speaker_embedding": torch.zeros(64)}))


def test_tiny_base_preset_materialises_and_clones(tmp_path, monkeypatch):
    monkeypatch.setenv("VOXLANE_CACHE", str(tmp_path))
    spec = registry.resolve("qwen3-tts-tiny-base")
    lm, encoder = registry.load_lm(spec, "cpu", "float32"), registry.load_voice_encoder(spec, "cpu", "float32")
    assert isinstance(encoder, Qwen3TTSVoiceEncoder) and lm.supports_reference
    audio = 0.3 * torch.sin(torch.arange(12000) * 0.02)
    [tensors] = encoder.encode([audio], [False])
    prompt = lm.encode_prompt("Hello world.", None, VoiceReference(tensors, "The quick brown fox."))
    assert prompt.num_tokens > tensors["ref_codes"].shape[0]  # the reference frames are in the prefill
    assert registry.load_voice_encoder(registry.resolve("qwen3-tts-tiny"), "cpu", "float32") is None


@pytest.mark.parametrize("name, hidden", [("qwen3-tts-0.6b-base", 1024), ("qwen3-tts-1.7b-base", 2048)])
def test_full_base_presets_have_a_speaker_encoder_of_the_talker_width(name, hidden):
    config = preset_config(name)
    assert config.is_base and config.talker.spk_id == {}
    assert config.talker.hidden_size == config.speaker_encoder.enc_dim == hidden
    assert registry.resolve(name).preset == name


def test_an_in_context_clone_decodes_after_the_reference_codes(golden):
    """The reference decodes the answer with the reference's codes in front: they are the codec's prefix."""
    lm = lm_for("auto")
    in_context, x_vector = reference_of(golden, META["cases"][1]), reference_of(golden, META["cases"][0])
    assert torch.equal(lm.codec_prefix(lm.encode_prompt("Hello.", None, in_context)), golden["ref_codes"])
    assert lm.codec_prefix(lm.encode_prompt("Hello.", None, x_vector)) is None
