"""The interleaved target-speaker-extraction LM (models/tse/) through the real LM engine: input read in fixed
chunks whatever the pieces it came in (the same seed and input give the same output for any cut), a stream that
waits for its input keeps its slot while others go on, the output is as long as the input and ends once a closed
input is answered, and bad or stalled input ends only its own stream."""
from __future__ import annotations

import random

import pytest
import torch

from backend_python.engine.config import EngineConfig
from backend_python.engine.engine import LMEngine
from backend_python.engine.input_pieces import INPUT_IDLE_CODE, INPUT_PAST_CAP_CODE
from backend_python.engine.sequence import Sequence
from backend_python.models.base import SamplingParams, VoiceReference
from backend_python.models.tse import description, family, tiny
from backend_python.models.tse.lm import TSELM
from backend_python.models.tse.presets import preset_config, tse_1_7b
from protocol.reasons import Ended, EndReason
from scheduler import AdmissionPolicyName, ChunkingConfig, SchedulerConfig
from tests.unit.test_engine import ListSink

CHUNK = 4  # the tiny preset's input chunk


@pytest.fixture(scope="module")
def lm() -> TSELM:
    return TSELM.from_config(preset_config("tse-tiny"), seed=0)


def enrollment(seed: int = 1) -> VoiceReference:
    return VoiceReference({"speaker_embedding": torch.randn(64, generator=torch.Generator().manual_seed(seed))})


NUM_CODEBOOKS = preset_config("tse-tiny").num_codebooks


def input_frames(num_frames: int, seed: int = 2) -> torch.Tensor:
    return torch.randint(0, 64, (num_frames, NUM_CODEBOOKS), generator=torch.Generator().manual_seed(seed))


def make_engine(lm: TSELM, clock=None, **overrides) -> LMEngine:
    config = EngineConfig(max_slots=3, max_seq_len=256, codec_left_context_frames=3,
                          scheduler=SchedulerConfig(chunking=ChunkingConfig(first_chunk_frames=2, chunk_frames=4,
                                                                            chunk_growth=None),
                                                    admission_policy=AdmissionPolicyName.PREFILL_FIRST), **overrides)
    return LMEngine(lm, config, **({"clock": clock} if clock else {}))


def stream(lm: TSELM, name: str, seed: int = 5, max_frames: int = 120) -> tuple[Sequence, ListSink]:
    """A stream of `max_frames` at most (120 fit make_engine's 256 positions: 2 + 2 × 120 + 4 + 1)."""
    sink = ListSink()
    return Sequence(request_id=name, prompt=lm.open_input(enrollment()), sampling=SamplingParams(), ignore_eos=False,
                    max_frames=max_frames, sink=sink, generator=torch.Generator().manual_seed(seed)), sink


def steps(engine: LMEngine, n: int) -> None:
    for _ in range(n):
        engine._collect(0)
        engine.step()


def frames_of(sink: ListSink) -> torch.Tensor:
    return torch.cat([c.tokens[c.context_frames:] for c in sink.chunks]) if sink.chunks else torch.zeros(0, NUM_CODEBOOKS)


def speak(lm: TSELM, cuts: list[int], frames: torch.Tensor, steps_between: int = 2, overlap: bool = False) -> ListSink:
    """Feed `frames` cut at `cuts` (piece sizes), a few engine steps after each piece, then close."""
    engine = make_engine(lm, overlap_steps=overlap)
    seq, sink = stream(lm, "s")
    engine.add(seq)
    start = 0
    for size in cuts:
        engine.add_input("s", frames[start:start + size], is_final=False)
        start += size
        steps(engine, steps_between)
    engine.add_input("s", frames[start:], is_final=True)
    steps(engine, 3 * frames.shape[0] + 10)
    assert sink.done.is_set() and sink.error is None, sink.error
    return sink


def random_cuts(total: int, rng: random.Random) -> list[int]:
    cuts, left = [], total
    while left > 0 and rng.random() < 0.9:
        size = min(left, rng.choice([0, 1, 2, 3, 5, 7, 11]))
        cuts.append(size)
        left -= size
    return cuts


@pytest.mark.parametrize("overlap", [False, True])
def test_the_output_is_as_long_as_the_input_and_the_same_however_the_input_is_cut(lm, overlap):
    frames = input_frames(23)  # 5 chunks of 4, then a closing chunk of 3
    whole = frames_of(speak(lm, [], frames))
    assert whole.shape == (23, NUM_CODEBOOKS)
    rng = random.Random(0)
    for _ in range(4):
        cuts = random_cuts(23, rng)
        cut = speak(lm, cuts, frames, steps_between=rng.choice([0, 1, 3]), overlap=overlap)
        assert torch.equal(frames_of(cut), whole), cuts
    assert not torch.equal(frames_of(speak(lm, [], input_frames(23, seed=9))), whole)  # it hears its input


def test_a_chunk_is_read_only_once_the_output_has_caught_up(lm, monkeypatch):
    reads: list[tuple[int, int]] = []
    read = TSELM._read

    def recording(self, slots, states, num_frames):
        reads.extend((state.read, state.written) for state in states)
        read(self, slots, states, num_frames)
    monkeypatch.setattr(TSELM, "_read", recording)
    speak(lm, [10, 10], input_frames(23))
    assert reads == [(0, 0), (4, 4), (8, 8), (12, 12), (16, 16), (20, 20)]  # read chunk c after writing chunk c-1


def test_streams_that_read_a_whole_chunk_in_the_same_step_share_one_call_and_hear_what_they_would_alone(lm,
                                                                                                       monkeypatch):
    calls: list[int] = []
    read = TSELM._read

    def counting(self, slots, states, num_frames):
        calls.append(len(slots))
        read(self, slots, states, num_frames)
    frames = input_frames(12)
    alone = frames_of(speak(lm, [], frames))
    monkeypatch.setattr(TSELM, "_read", counting)
    engine = make_engine(lm)
    sinks = []
    for name in ("a", "b"):
        seq, sink = stream(lm, name)
        engine.add(seq)
        engine.add_input(name, frames, is_final=True)
        sinks.append(sink)
    steps(engine, 60)
    assert max(calls) == 2  # both streams' chunks in one backbone call
    for sink in sinks:
        assert sink.done.is_set() and sink.error is None
        torch.testing.assert_close(frames_of(sink), alone, rtol=0, atol=0)


def test_a_stream_waiting_for_its_input_keeps_its_slot_while_another_speaks(lm):
    engine = make_engine(lm)
    waiting, waiting_sink = stream(lm, "waiting")
    other, other_sink = stream(lm, "other")
    engine.add(waiting)
    engine.add(other)
    engine.add_input("waiting", input_frames(3), is_final=False)  # less than a chunk: nothing to answer yet
    engine.add_input("other", input_frames(12), is_final=True)
    steps(engine, 40)
    assert other_sink.done.is_set() and frames_of(other_sink).shape[0] == 12
    assert not waiting_sink.done.is_set() and not waiting_sink.chunks and waiting.slot is not None
    assert lm.is_waiting_for_input(waiting.slot)
    engine.add_input("waiting", input_frames(2, seed=4), is_final=True)
    steps(engine, 20)
    assert waiting_sink.done.is_set() and waiting_sink.error is None and frames_of(waiting_sink).shape[0] == 5


@pytest.mark.parametrize("bad, message", [
    (torch.zeros(2, NUM_CODEBOOKS - 1, dtype=torch.long), f"must be \\[N, {NUM_CODEBOOKS}\\]"),
    (torch.full((2, NUM_CODEBOOKS), 64), "must be in \\[0, 64\\)"),
])
def test_a_bad_piece_ends_only_its_own_stream(lm, bad, message):
    engine = make_engine(lm)
    seq, sink = stream(lm, "bad")
    good, good_sink = stream(lm, "good")
    engine.add(seq)
    engine.add(good)
    engine.add_input("bad", input_frames(4), is_final=False)
    engine.add_input("good", input_frames(8), is_final=True)
    steps(engine, 3)
    engine.add_input("bad", bad, is_final=False)
    steps(engine, 30)
    assert isinstance(sink.error, Ended) and sink.error.reason is EndReason.REFUSED_BAD_INPUT
    assert sink.error.param == "input_audio" and __import__("re").search(message, sink.error.message)
    assert good_sink.done.is_set() and good_sink.error is None and frames_of(good_sink).shape[0] == 8


def test_an_input_that_stops_coming_times_out(lm):
    now = [0.0]
    engine = make_engine(lm, clock=lambda: now[0])
    seq, sink = stream(lm, "idle")
    seq.text_idle_timeout_s = 5.0
    engine.add(seq)
    engine.add_input("idle", input_frames(4), is_final=False)
    steps(engine, 10)
    assert not sink.done.is_set() and frames_of(sink).shape[0] >= 2
    now[0] = 6.0
    steps(engine, 2)
    assert isinstance(sink.error, Ended) and sink.error.code == INPUT_IDLE_CODE


@pytest.mark.parametrize("is_closed", [True, False])
def test_an_output_that_reaches_its_cap_before_its_input_ends_says_so_after_its_audio(lm, is_closed):
    """The input past `max_audio_seconds` is never answered: the stream ends with an error naming the cap (not
    as if it were done), after every frame up to the cap was sent."""
    engine = make_engine(lm)
    seq, sink = stream(lm, "capped", max_frames=8)
    engine.add(seq)
    engine.add_input("capped", input_frames(12), is_final=is_closed)
    steps(engine, 40)
    assert isinstance(sink.error, Ended) and sink.error.code == INPUT_PAST_CAP_CODE
    assert sink.error.param == "max_audio_seconds" and "0.64 s" in sink.error.message
    assert frames_of(sink).shape[0] == 8
    fits, fits_sink = stream(lm, "fits", max_frames=12)  # an input as long as the cap ends as usual
    engine.add(fits)
    engine.add_input("fits", input_frames(12), is_final=True)
    steps(engine, 40)
    assert fits_sink.done.is_set() and fits_sink.error is None and frames_of(fits_sink).shape[0] == 12


def test_a_stream_whose_cap_does_not_fit_counts_the_input_s_positions_too(lm):
    """An interleaved stream writes its input's frames as well as its own: the length check asks the model."""
    engine = make_engine(lm)
    seq, sink = stream(lm, "long", max_frames=126)  # 2 + 2 × 126 + 4 + 1 = 259 > 256 (126 frames alone fit)
    engine.add(seq)
    steps(engine, 3)
    assert isinstance(sink.error, str) and "259 positions" in sink.error and "max_seq_len is 256" in sink.error


def test_the_prompt_needs_an_enrollment_and_no_text(lm):
    with pytest.raises(ValueError, match="speaker_embedding"):
        lm.open_input(VoiceReference({}))
    with pytest.raises(ValueError, match="not text"):
        lm.encode_prompt("Hello.", None)
    prompt = lm.open_input(enrollment())
    assert prompt.num_tokens == 2 and prompt.input is not None and not prompt.input.is_closed
    assert lm.kv_positions_for(2, 10) >= 2 + 10 + 10 + CHUNK


def test_the_tiny_checkpoint_loads_back_and_its_codec_and_encoder_are_the_codec_model_s(tmp_path):
    from backend_python.models import registry

    path = tiny.build_tiny_checkpoint(tmp_path / "tse-tiny")
    assert description.is_checkpoint(path)
    built, loaded = TSELM.from_config(preset_config("tse-tiny"), seed=0), TSELM.from_pretrained(path)
    for (name, a), (_, b) in zip(sorted(built.state_dict().items()), sorted(loaded.state_dict().items())):
        assert torch.equal(a, b), name
    spec = registry.ModelSpec("tse-tiny", "tse", checkpoint=path)
    codec = registry.load_codec(spec, "cpu", "float32")
    encoder = registry.load_voice_encoder(spec, "cpu", "float32")
    assert (codec.num_codebooks, codec.codebook_size, codec.shape.frame_rate) == (NUM_CODEBOOKS, 64, 12.5)
    assert encoder.reference_tensors["speaker_embedding"] == ("FP32", [64])
    assert registry.codec_windowing(spec).left_context_frames == codec.left_context_frames
    assert family.codec_model_of(spec) == "qwen3-tts-tiny-base"


def test_the_full_shape_is_a_qwen3_1_7b_backbone_over_the_12hz_codec():
    c = tse_1_7b()
    assert (c.backbone.num_hidden_layers, c.backbone.hidden_size, c.num_codebooks, c.codebook_size) == (
        28, 2048, 16, 2048)
    with torch.device("meta"):
        lm = TSELM(c)
    assert 1.5e9 < sum(p.numel() for p in lm.parameters()) < 2.0e9
