"""CSM voice cloning (in context) against transformers' CsmForConditionalGeneration on the tiny random checkpoint:
our Mimi codes equal `MimiModel.encode`'s; a cloned prompt (the reference's transcript and audio as a turn,
then the text) embeds, prefills and decodes greedily as transformers' model fed the same conversation
(`input_ids` with audio and audio-eos ids, `input_values` and their cutoffs, coded by its own Mimi); a
streamed text hears the reference first in every segment; the engine speaks a cloned prompt as the model alone.

Measured on the CPU (fp32): prompt embeddings identical (0: the same table lookups), last-position logits max
|diff| 6.6e-7 (one audio turn, 37 positions) and 4.8e-7 (two, 57 positions) for logits up to ~3.5, greedy frames
identical. LOGITS_ATOL leaves ~15x headroom.
"""
from __future__ import annotations

import pytest
import torch

from backend_python.engine.engine import EngineConfig, LMEngine
from backend_python.engine.sequence import Sequence
from backend_python.models import registry
from backend_python.models.base import DecodeBatch, SamplingParams, VoiceReference
from backend_python.models.csm import CsmLM, MimiCodec
from backend_python.models.csm.checkpoint import read_config
from backend_python.models.csm.presets import TINY_CODEBOOK_SIZE
from backend_python.models.csm.voice_encoder import CsmVoiceEncoder
from backend_python.models.text_segments import SegmentContext, SegmentRules
from scheduler import AdmissionPolicyName, ChunkingConfig, SchedulerConfig
from tests.unit.test_csm_lm import checkpoint, reference  # noqa: F401 (the tiny checkpoint and transformers on it)
from tests.unit.test_engine import ListSink

torch.set_flush_denormal(True)

EMBED_ATOL = 0.0
LOGITS_ATOL = 1e-5
TRANSCRIPT = "The quick brown fox jumps over the lazy dog."
TEXT = "Get the trust fund to the bank early."
PREVIOUS = "Hello world, this is a test."
GREEDY = SamplingParams(temperature=0.0, repetition_penalty=1.0)
NOT_AUDIO = list(range(TINY_CODEBOOK_SIZE, TINY_CODEBOOK_SIZE + 3))
NUM_FRAMES = 8


def waveform(num_samples: int, seed: int) -> torch.Tensor:
    """A tone with noise: [N] float32 in about [-0.45, 0.45]."""
    noise = torch.randn(num_samples, generator=torch.Generator().manual_seed(seed))
    return 0.3 * torch.sin(torch.arange(num_samples) * 0.02 * (1 + seed)) + 0.05 * noise




@pytest.fixture(scope="module")
def encoder(checkpoint) -> CsmVoiceEncoder:
    return CsmVoiceEncoder(MimiCodec.from_pretrained(checkpoint, read_config(checkpoint).codec))


@pytest.fixture
def lm(checkpoint) -> CsmLM:
    model = CsmLM.from_pretrained(checkpoint)
    model.allocate_slots(num_slots=2, max_seq_len=256)
    return model


@pytest.fixture(scope="module")
def audio() -> torch.Tensor:
    return waveform(13000, seed=0)  # 6.8 frames: the last one partial


@pytest.fixture(scope="module")
def cloned(encoder, audio) -> VoiceReference:
    [tensors] = encoder.encode([audio], [False])
    return VoiceReference(tensors, TRANSCRIPT)


# ---- the voice encoder ---------------------------------------------------------------------------

def test_codes_equal_transformers_mimi_encode(encoder, reference, audio):
    [out] = encoder.encode([audio], [False])
    with torch.no_grad():
        expected = reference.codec_model.encode(audio[None, None]).audio_codes[0].T  # [T, 32]
    assert out.keys() == {"ref_codes"} and out["ref_codes"].dtype == torch.int64
    assert out["ref_codes"].shape == (7, 32)  # ceil(13000 / 1920)
    assert torch.equal(out["ref_codes"], expected)
    assert out["ref_codes"].unique(dim=0).shape[0] == 7  # the frames differ: the audio is in them


def test_a_batch_encodes_each_request_as_alone(encoder, audio):
    other = waveform(5000, seed=1)
    batch = encoder.encode([other, audio], [False, False])
    assert torch.equal(batch[0]["ref_codes"], encoder.encode([other], [False])[0]["ref_codes"])
    assert torch.equal(batch[1]["ref_codes"], encoder.encode([audio], [False])[0]["ref_codes"])
    assert batch[0]["ref_codes"].shape == (3, 32)


def test_reference_tensors_declare_what_encode_returns(encoder, audio):
    [out] = encoder.encode([audio], [False])
    assert encoder.sample_rate == 24000 and encoder.reference_tensors == {"ref_codes": ("INT32", [-1, 32])}
    assert out["ref_codes"].max() < TINY_CODEBOOK_SIZE


def test_x_vector_only_is_refused_by_name(encoder, audio):
    with pytest.raises(ValueError, match="only in context.*x_vector_only is not supported"):
        encoder.encode([audio, audio], [False, True])


@pytest.mark.parametrize("bad", [torch.zeros(1919), torch.zeros(2, 4000)], ids=["under-a-frame", "stereo"])
def test_audio_shorter_than_a_frame_or_not_mono_is_refused(encoder, bad):
    with pytest.raises(ValueError, match=r"mono \[N\] with N >= 1920"):
        encoder.encode([bad], [False])


def test_a_half_precision_codec_is_encoded_in_float32(checkpoint, audio):
    half = CsmVoiceEncoder(MimiCodec.from_pretrained(checkpoint, read_config(checkpoint).codec, dtype=torch.bfloat16))
    assert {p.dtype for p in half.parameters()} == {torch.float32}
    assert half.encode([audio], [False])[0]["ref_codes"].shape == (7, 32)


def test_the_registry_gives_the_codec_weights_in_float32(tmp_path, monkeypatch, checkpoint):
    monkeypatch.setenv("VOXLANE_CACHE", str(tmp_path))
    spec = registry.resolve("csm-tiny")
    encoder = registry.load_voice_encoder(spec, "cpu", "bfloat16")
    codec = registry.load_codec(spec, "cpu", "float32")
    assert isinstance(encoder, CsmVoiceEncoder) and encoder.device == torch.device("cpu")
    ours = encoder.model.state_dict()
    assert all(v.dtype == torch.float32 for v in ours.values() if v.is_floating_point())
    assert all(torch.equal(ours[k], v) for k, v in codec.model.state_dict().items())
    assert registry.load_voice_encoder(registry.resolve(str(checkpoint)), "cpu", "float32") is not None


# ---- the prompt, against transformers --------------------------------------------------------------

def conversation(lm: CsmLM, turns: list[tuple[str, int]], text: str) -> torch.Tensor:
    """transformers' CSM input_ids: per audio turn (transcript, frames) the "[0]transcript" tokens, one audio
    id per frame and the audio-eos id; then the text's. -> [1, L] int64."""
    c, ids = lm.config, []
    for transcript, num_frames in turns:
        ids += text_ids(lm, transcript) + [c.audio_token_id] * num_frames + [c.audio_eos_token_id]
    return torch.tensor([ids + text_ids(lm, text)])


def text_ids(lm: CsmLM, text: str) -> list[int]:
    ids = lm.encode_prompt(text, "0").tensors["text_ids"].tolist()
    assert lm.config.audio_token_id not in ids and lm.config.audio_eos_token_id not in ids  # else they'd be audio
    return ids


def audio_inputs(*waves: torch.Tensor) -> dict[str, torch.Tensor]:
    cutoffs = torch.cumsum(torch.tensor([w.numel() for w in waves]), 0)
    return {"input_values": torch.cat(waves)[None, None], "input_values_cutoffs": cutoffs[None]}


def test_prompt_embeddings_and_logits_equal_transformers(lm, reference, cloned, audio):
    prompt = lm.encode_prompt(TEXT, "0", cloned)
    ids = conversation(lm, [(TRANSCRIPT, 7)], TEXT)
    assert prompt.num_tokens == ids.shape[1]
    with torch.no_grad():
        expected = reference._merge_input_ids_with_input_values(ids, **audio_inputs(audio))["inputs_embeds"][0]
        torch.testing.assert_close(lm._prompt_embeds(prompt), expected, rtol=0, atol=EMBED_ATOL)
        lm.prefill(1, prompt)
        logits = reference(input_ids=ids, **audio_inputs(audio)).logits[0, -1]
    torch.testing.assert_close(lm._memory.logits[1], logits, rtol=0, atol=LOGITS_ATOL)


def greedy_frames(lm: CsmLM, prompt, num_frames: int) -> torch.Tensor:
    lm.prefill(0, prompt)
    batch = DecodeBatch([0], [GREEDY], [torch.Generator().manual_seed(0)], [True])
    return torch.cat([lm.decode(batch)[0] for _ in range(num_frames)])  # [frames, 32]


def test_greedy_frames_equal_transformers(lm, reference, cloned, audio):
    ids = conversation(lm, [(TRANSCRIPT, 7)], TEXT)
    with torch.no_grad():
        expected = reference.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **audio_inputs(audio),
                                      max_new_tokens=NUM_FRAMES, do_sample=False, depth_decoder_do_sample=False,
                                      suppress_tokens=NOT_AUDIO, depth_decoder_suppress_tokens=NOT_AUDIO)[0]
    frames = greedy_frames(lm, lm.encode_prompt(TEXT, "0", cloned), NUM_FRAMES)
    assert torch.equal(frames, expected)
    assert not torch.equal(frames, greedy_frames(lm, lm.encode_prompt(TEXT, "0"), NUM_FRAMES))  # it heard the voice


def test_a_segment_hears_the_reference_then_the_segment_before_as_transformers(lm, reference, encoder, cloned,
                                                                                audio):
    """Both audio turns coded from audio here, so transformers' own Mimi codes the conversation."""
    before = waveform(9000, seed=2)
    [spoken] = encoder.encode([before], [False])
    prompt = lm.encode_segment(TEXT, "0", SegmentContext(PREVIOUS, spoken["ref_codes"]), cloned)
    ids = conversation(lm, [(TRANSCRIPT, 7), (PREVIOUS, 5)], TEXT)
    assert prompt.num_tokens == ids.shape[1]
    with torch.no_grad():
        expected = reference._merge_input_ids_with_input_values(ids, **audio_inputs(audio, before))["inputs_embeds"]
        torch.testing.assert_close(lm._prompt_embeds(prompt), expected[0], rtol=0, atol=EMBED_ATOL)
        lm.prefill(0, prompt)
        logits = reference(input_ids=ids, **audio_inputs(audio, before)).logits[0, -1]
    torch.testing.assert_close(lm._memory.logits[0], logits, rtol=0, atol=LOGITS_ATOL)


def test_a_cloned_voice_is_the_requests_speaker(lm, cloned):
    """The reference's turn is spoken by the request's voice: the same speaker as the text."""
    prompt = lm.encode_prompt("Hi there.", "1", cloned)
    assert lm.tokenizer.decode(prompt.tensors["reference_ids"]) == f"<|begin_of_text|>[1]{TRANSCRIPT}<|end_of_text|>"
    assert torch.equal(prompt.tensors["reference_codes"], cloned.tensors["ref_codes"])
    assert lm.supports_reference
    plain = lm.encode_prompt("Hi there.", "1", reference=None)  # no reference: the prompt it always was
    assert plain.tensors.keys() == {"text_ids"} and torch.equal(plain.tensors["text_ids"], prompt.tensors["text_ids"])


def test_a_reference_without_its_transcript_or_with_bad_codes_is_refused(lm, cloned):
    codes = cloned.tensors["ref_codes"]
    for text in (None, "  "):
        with pytest.raises(ValueError, match=r"needs its transcript \(ref_text\)"):
            lm.encode_prompt(TEXT, None, VoiceReference(cloned.tensors, text))
    bad = {"no codes": ({}, "has no 'ref_codes'"), "wrong width": ({"ref_codes": codes[:, :16]}, r"\[T >= 1, 32\]"),
           "no frames": ({"ref_codes": codes[:0]}, r"\[T >= 1, 32\]"),
           "floats": ({"ref_codes": codes.float()}, "integer"),
           "out of range": ({"ref_codes": codes + TINY_CODEBOOK_SIZE}, r"lie in \[0, 64\)")}
    for tensors, message in bad.values():
        with pytest.raises(ValueError, match=message):
            lm.encode_prompt(TEXT, None, VoiceReference(tensors, TRANSCRIPT))
        with pytest.raises(ValueError, match=message):
            lm.open_text(None, VoiceReference(tensors, TRANSCRIPT))  # a stream is refused before its first segment
    with pytest.raises(ValueError, match="unknown voice"):
        lm.open_text("nobody", cloned)


def test_int32_codes_from_the_wire_build_the_same_prompt(lm, cloned):
    wire = VoiceReference({"ref_codes": cloned.tensors["ref_codes"].to(torch.int32)}, TRANSCRIPT)
    assert torch.equal(lm._prompt_embeds(lm.encode_prompt(TEXT, None, wire)),
                       lm._prompt_embeds(lm.encode_prompt(TEXT, None, cloned)))
    assert lm.encode_prompt(TEXT, None, wire).tensors["reference_codes"].dtype == torch.int64


# ---- through the engine --------------------------------------------------------------------------

RULES = SegmentRules(chars_per_s=60.0)  # short budgets: 37 characters are 8 frames at 12.5 Hz
MAX_FRAMES = 20


def make_engine(lm: CsmLM) -> LMEngine:
    chunking = ChunkingConfig(first_chunk_frames=2, chunk_frames=4, chunk_growth=None)
    return LMEngine(lm, EngineConfig(max_slots=2, max_seq_len=256, codec_left_context_frames=2,
                                     scheduler=SchedulerConfig(chunking=chunking,
                                                               admission_policy=AdmissionPolicyName.PREFILL_FIRST)))


def run(engine: LMEngine, seq: Sequence, steps: int, text: str | None = None) -> torch.Tensor:
    """Add `seq` (and its whole streamed `text`), step; -> the frames it streamed [T, 32]."""
    engine.add(seq)
    if text is not None:
        engine.add_text(seq.request_id, text, is_final=True)
    for _ in range(steps):
        engine._collect(0)
        engine.step()
    assert seq.sink.done.is_set() and seq.sink.error is None
    return torch.cat([c.tokens[c.context_frames:] for c in seq.sink.chunks])


def test_the_engine_speaks_a_cloned_prompt_as_the_model_alone(checkpoint, cloned):
    sampling = SamplingParams()
    lm = CsmLM.from_pretrained(checkpoint)
    prompt = lm.encode_prompt(TEXT, None, cloned)
    seq = Sequence(request_id="clone", prompt=prompt, sampling=sampling, ignore_eos=True, max_frames=NUM_FRAMES,
                   sink=ListSink(), generator=torch.Generator().manual_seed(3))
    frames = run(make_engine(lm), seq, NUM_FRAMES + 3)
    alone = CsmLM.from_pretrained(checkpoint)
    alone.allocate_slots(1, 256)
    alone.prefill(0, prompt)
    batch = DecodeBatch([0], [sampling], [torch.Generator().manual_seed(3)], [True])
    assert torch.equal(frames, torch.cat([alone.decode(batch)[0] for _ in range(NUM_FRAMES)]))


def test_a_streamed_text_clones_in_every_segment(checkpoint, cloned, monkeypatch):
    """Each segment's prompt: the reference, then (from the second on) the segment before, then its text; the
    first segment speaks as a whole-text cloned request of its text."""
    lm = CsmLM.from_pretrained(checkpoint)
    prompts = []
    prefill = lm.prefill_batch
    monkeypatch.setattr(lm, "prefill_batch", lambda slots, batch: prompts.extend(batch) or prefill(slots, batch))
    feed = lm.open_text(None, cloned)
    feed.rules = RULES
    seq = Sequence(request_id="s", prompt=None, sampling=SamplingParams(), ignore_eos=True,
                   max_frames=MAX_FRAMES, sink=ListSink(), generator=torch.Generator().manual_seed(3), text=feed)
    engine = make_engine(lm)
    frames = run(engine, seq, 3 * MAX_FRAMES, text=f"{TEXT} Then wait for it.")
    budget = RULES.budget_frames(TEXT, lm.frame_rate)
    assert len(prompts) == 2 and frames.shape[0] == MAX_FRAMES
    for prompt in prompts:
        assert torch.equal(prompt.tensors["reference_codes"], cloned.tensors["ref_codes"])
    assert "context_codes" not in prompts[0].tensors
    assert torch.equal(prompts[1].tensors["context_codes"], frames[:budget])
    expected = lm.encode_segment("Then wait for it.", None, SegmentContext(TEXT, frames[:budget]), cloned)
    assert torch.equal(lm._prompt_embeds(prompts[1]), lm._prompt_embeds(expected))
    alone = Sequence(request_id="alone", prompt=lm.encode_prompt(TEXT, None, cloned), sampling=SamplingParams(),
                     ignore_eos=True, max_frames=budget, sink=ListSink(), generator=torch.Generator().manual_seed(3))
    assert torch.equal(frames[:budget], run(engine, alone, budget + 3))
