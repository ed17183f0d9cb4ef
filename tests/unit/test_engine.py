"""The LM engine's loop with the tiny Qwen3-TTS: chunk cutting, context windows, joining mid-flight."""
from __future__ import annotations

import threading

import pytest
import torch

from backend_python.engine.engine import EngineConfig, LMEngine
from backend_python.engine.sequence import Chunk, Sequence
from backend_python.models.base import SamplingParams
from backend_python.models.qwen3_tts.lm import Qwen3TTSLM
from backend_python.models.qwen3_tts.presets import preset_config
from scheduler import AdmissionPolicyName, ChunkingConfig, SchedulerConfig


class ListSink:
    def __init__(self) -> None:
        self.chunks: list[Chunk] = []
        self.error: str | None = None
        self.done = threading.Event()

    def emit(self, chunk: Chunk) -> None:
        self.chunks.append(chunk)

    def finish(self, error: str | None) -> None:
        self.error = error
        self.done.set()


@pytest.fixture(scope="module")
def lm() -> Qwen3TTSLM:
    return Qwen3TTSLM.from_config(preset_config("qwen3-tts-tiny"), seed=0)


def make_engine(lm, **overrides) -> LMEngine:
    config = EngineConfig(max_slots=4, max_seq_len=256, codec_left_context_frames=3,
                          scheduler=SchedulerConfig(chunking=ChunkingConfig(first_chunk_frames=2, chunk_frames=5, chunk_growth=None),
                                                    admission_policy=AdmissionPolicyName.PREFILL_FIRST))
    return LMEngine(lm, EngineConfig(**{**config.__dict__, **overrides}))


def make_seq(lm, text: str, frames: int, seed: int = 0) -> tuple[Sequence, ListSink]:
    sink = ListSink()
    seq = Sequence(request_id=text, prompt=lm.encode_prompt(text, None), sampling=SamplingParams(),
                   ignore_eos=True, max_frames=frames, sink=sink, generator=torch.Generator().manual_seed(seed))
    return seq, sink


def run_until_done(engine: LMEngine, sinks: list[ListSink], max_steps: int = 500) -> None:
    for _ in range(max_steps):
        engine._collect(0)
        engine.step()
        if all(s.done.is_set() for s in sinks):
            return
    raise AssertionError("requests did not finish")


def test_chunks_have_planned_sizes_and_left_context(lm):
    engine = make_engine(lm)
    seq, sink = make_seq(lm, "Hello there.", frames=13)
    engine.add(seq)
    run_until_done(engine, [sink])
    assert sink.error is None
    assert [c.chunk_index for c in sink.chunks] == [0, 1, 2, 3]
    assert [c.num_new_frames for c in sink.chunks] == [2, 5, 5, 1]
    assert [c.context_frames for c in sink.chunks] == [0, 2, 3, 3]
    frames = torch.cat([c.tokens[c.context_frames:] for c in sink.chunks])
    assert frames.shape == (13, lm.num_codebooks)
    for chunk in sink.chunks[1:]:  # the context is the request's own preceding frames
        start = sum(c.num_new_frames for c in sink.chunks[: chunk.chunk_index])
        torch.testing.assert_close(chunk.tokens[: chunk.context_frames], frames[start - chunk.context_frames: start])


def test_request_joining_mid_flight_gets_the_same_tokens_as_alone(lm):
    alone_engine = make_engine(lm)
    alone, alone_sink = make_seq(lm, "Joining later.", frames=8, seed=7)
    alone_engine.add(alone)
    run_until_done(alone_engine, [alone_sink])

    engine = make_engine(lm)
    first, first_sink = make_seq(lm, "Already running for a while.", frames=12, seed=1)
    engine.add(first)
    for _ in range(4):
        engine._collect(0)
        engine.step()
    late, late_sink = make_seq(lm, "Joining later.", frames=8, seed=7)
    engine.add(late)
    run_until_done(engine, [first_sink, late_sink])
    tokens = lambda sink: torch.cat([c.tokens[c.context_frames:] for c in sink.chunks])
    torch.testing.assert_close(tokens(late_sink), tokens(alone_sink), rtol=0, atol=0)
    assert tokens(first_sink).shape[0] == 12


def test_request_too_long_for_the_cache_fails_alone(lm):
    engine = make_engine(lm, max_seq_len=64)
    big, big_sink = make_seq(lm, "Too long.", frames=100)
    ok, ok_sink = make_seq(lm, "Fine.", frames=3)
    engine.add(big)
    engine.add(ok)
    run_until_done(engine, [big_sink, ok_sink])
    assert "max_seq_len" in big_sink.error and not big_sink.chunks
    assert ok_sink.error is None and sum(c.num_new_frames for c in ok_sink.chunks) == 3


def test_the_length_check_takes_the_models_count_of_positions_and_names_what_asked(lm):
    """The one check behind the LM lane's refusal and the engine's admission (EngineConfig.length_error), over
    the positions the model says a stream writes (SpeechLM.kv_positions_for: the prompt, the frames and one)."""
    config = EngineConfig(max_seq_len=64)
    assert lm.kv_positions_for(40, 23) == 64 and config.length_error(64, 40, 23) is None
    assert config.length_error(lm.kv_positions_for(40, 24), 40, 24, "its text segment") == (
        "its text segment needs 65 positions (prompt 40 tokens + 24 frames) but the server's max_seq_len is 64")


def test_more_requests_than_slots_wait_for_a_free_slot(lm):
    engine = make_engine(lm, max_slots=2)
    pairs = [make_seq(lm, f"Request {i}.", frames=3, seed=i) for i in range(5)]
    for seq, _ in pairs:
        engine.add(seq)
    run_until_done(engine, [sink for _, sink in pairs])
    assert all(sink.error is None and sum(c.num_new_frames for c in sink.chunks) == 3 for _, sink in pairs)


def test_cancelled_request_frees_its_slot(lm):
    engine = make_engine(lm, max_slots=1)
    long, long_sink = make_seq(lm, "Long.", frames=200)
    short, short_sink = make_seq(lm, "Short.", frames=2)
    engine.add(long)
    engine.add(short)
    engine._collect(0)
    engine.step()
    engine.cancel_id(long.request_id)
    run_until_done(engine, [long_sink, short_sink])
    assert long_sink.error == "cancelled"
    assert short_sink.error is None


class StepClock:
    """A fake clock that the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_deadline_aware_admission_holds_new_requests_while_streams_starve(lm):
    clock = StepClock()
    config = EngineConfig(max_slots=4, max_seq_len=256, codec_left_context_frames=3,
                          scheduler=SchedulerConfig(chunking=ChunkingConfig(first_chunk_frames=1, chunk_frames=2, chunk_growth=None),
                                                    admission_policy=AdmissionPolicyName.DEADLINE_AWARE,
                                                    max_wait_s=5.0))
    engine = LMEngine(lm, config, clock=clock)
    playing, playing_sink = make_seq(lm, "Already playing.", frames=40)
    engine.add(playing)
    engine._collect(0)
    engine.step()  # admitted at once (nothing is playing) and emits its first chunk
    assert playing_sink.chunks and playing.t_first_emitted == 0.0
    late, late_sink = make_seq(lm, "Arrives later.", frames=4)
    engine.add(late)  # arrival at t=0
    admitted_at = None
    for step in range(1, 10):
        clock.now = float(step)  # one second per step: the LM falls behind real time
        engine._collect(0)
        engine.step()
        if late.slot is not None and admitted_at is None:
            admitted_at = clock.now
    # the playing stream has less buffered audio than a prefill + a step: the newcomer waits
    # until the starvation guard (max_wait_s = 5) lets it in
    assert admitted_at == 5.0


def test_prefill_first_admits_at_once(lm):
    engine = make_engine(lm)
    playing, _ = make_seq(lm, "Already playing.", frames=40)
    engine.add(playing)
    engine._collect(0)
    engine.step()
    late, _ = make_seq(lm, "Arrives later.", frames=4)
    engine.add(late)
    engine._collect(0)
    engine.step()
    assert late.slot is not None


def test_a_failing_decode_ends_its_batch_and_the_loop_serves_on(lm, monkeypatch):
    engine = make_engine(lm)
    broken, broken_sink = make_seq(lm, "Broken step.", frames=5)
    engine.add(broken)
    real_decode = lm.decode
    calls = []

    def decode_once_broken(batch):
        calls.append(len(batch.slots))
        if len(calls) == 1:
            raise AttributeError("injected bug")
        return real_decode(batch)

    monkeypatch.setattr(lm, "decode", decode_once_broken)
    run_until_done(engine, [broken_sink])
    assert "injected bug" in broken_sink.error
    after, after_sink = make_seq(lm, "After the failure.", frames=3)
    engine.add(after)
    run_until_done(engine, [after_sink])
    assert after_sink.error is None and sum(c.num_new_frames for c in after_sink.chunks) == 3


def test_a_failing_prefill_ends_only_its_request(lm, monkeypatch):
    engine = make_engine(lm)
    real_prefill = lm.prefill

    def prefill(slot, prompt):
        if prompt is bad.prompt:
            raise TypeError("injected prefill bug")
        return real_prefill(slot, prompt)

    bad, bad_sink = make_seq(lm, "This prompt is the broken one, longer.", frames=3)
    good, good_sink = make_seq(lm, "Fine.", frames=3)
    monkeypatch.setattr(lm, "prefill", prefill)
    engine.add(bad)
    engine.add(good)
    run_until_done(engine, [bad_sink, good_sink])
    assert "injected prefill bug" in bad_sink.error
    assert good_sink.error is None
    assert sorted(engine.scheduler.free_slots) == [0, 1, 2, 3]


def test_a_full_queue_refuses_new_requests_at_once(lm):
    engine = make_engine(lm, max_queued=2)
    pairs = [make_seq(lm, f"Queued {i}.", frames=2, seed=i) for i in range(3)]
    assert [engine.try_add(seq) for seq, _ in pairs] == [True, True, False]
    run_until_done(engine, [sink for _, sink in pairs[:2]])
    assert engine.try_add(make_seq(lm, "Room again.", frames=2)[0])  # the queue drained


def test_cancel_by_request_id_frees_the_slot(lm):
    engine = make_engine(lm, max_slots=1)
    long, long_sink = make_seq(lm, "Long.", frames=200)
    engine.add(long)
    engine._collect(0)
    engine.step()
    engine.cancel_id(long.request_id)
    engine.cancel_id("no-such-request")  # ignored
    run_until_done(engine, [long_sink])
    assert long_sink.error == "cancelled" and sorted(engine.scheduler.free_slots) == [0]


def test_a_cancel_reaches_a_request_queued_behind_a_wake_up(lm):
    """The inbox holds a wake-up (another stream's cancel) and then a request, whose own cancel is
    already pending: one collect must take both, so the pending cancel finds the request."""
    engine = make_engine(lm, max_slots=1)
    seq, sink = make_seq(lm, "Queued.", frames=50)
    engine.cancel_id("another-stream")  # puts a wake-up first
    engine.add(seq)
    engine.cancel_id(seq.request_id)
    engine._collect(0)
    engine.step()
    assert sink.done.is_set() and sink.error == "cancelled" and sink.chunks == []


def test_stopping_ends_live_and_waiting_requests_as_shutting_down(lm):
    """A stop (the lane's finalize, at SIGTERM) ends every request with LANE_DOWN, which clients retry
    elsewhere: the requests were fine."""
    from protocol.reasons import SHUTTING_DOWN, EndReason

    engine = make_engine(lm, max_slots=1)
    pairs = [make_seq(lm, f"Long {i}.", frames=200, seed=i) for i in range(2)]  # one runs, one waits
    for seq, _ in pairs:
        engine.add(seq)
    engine.start()
    threading.Event().wait(0.3)  # the first is prefilled and decoding
    engine.stop()
    for _, sink in pairs:
        assert sink.done.is_set() and sink.error == SHUTTING_DOWN  # the sinks send it as it is
    assert SHUTTING_DOWN.reason is EndReason.LANE_DOWN and "shutting down" in SHUTTING_DOWN.message


def test_a_codec_prefix_is_the_left_context_of_the_first_chunks(lm):
    # an in-context clone's reference codes come before frame 0 (SpeechLM.codec_prefix): the chunks whose own
    # frames do not fill the left context also hold the prefix, later chunks only their own frames
    engine = make_engine(lm)
    seq, sink = make_seq(lm, "Hello there.", frames=13)
    k = lm.num_codebooks
    seq.codec_prefix = torch.arange(5 * k).view(5, k) % 7 + 100  # codes no frame of the model has
    engine.add(seq)
    run_until_done(engine, [sink])
    assert sink.error is None
    # chunk 1 (frame 2) keeps all 3 prefix frames chunk 0 had: the history a codec state of chunk 0 carries
    assert [(c.context_frames, c.start_frame) for c in sink.chunks] == [(3, 0), (5, 2), (3, 7), (3, 12)]
    frames = torch.cat([c.tokens[c.context_frames:] for c in sink.chunks])
    assert torch.equal(sink.chunks[0].tokens[:3], seq.codec_prefix[-3:])
    assert torch.equal(sink.chunks[1].tokens[:5], torch.cat((seq.codec_prefix[-3:], frames[:2])))
    assert torch.equal(sink.chunks[2].tokens[:3], frames[4:7])
