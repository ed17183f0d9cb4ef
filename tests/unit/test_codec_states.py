"""The codec lane's streaming states: the store's bookkeeping (fake clock), and the runner's stateful
path against full decodes, with gaps, eviction and freeing; off, the windowed path is unchanged."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from backend_python.engine.codec_runner import CodecRunner, StreamChunk
from backend_python.engine.codec_states import CodecStateLimits, CodecStateStore
from backend_python.models.codec_stream import CodecStreamState
from backend_python.models.qwen3_tts.codec import Qwen3TTSCodec
from tests.unit.test_codec_stream import CODEC_CONFIG, STREAM_ATOL, random_codes, ramp_bounds

torch.set_flush_denormal(True)
SPF = 1920
CONTEXT = 25  # the serving default's left context


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def state_of(num_bytes: int) -> CodecStreamState:
    return CodecStreamState({"tail": torch.zeros(num_bytes, dtype=torch.uint8)})


@pytest.fixture(scope="module")
def codec() -> Qwen3TTSCodec:
    return Qwen3TTSCodec.from_config(CODEC_CONFIG, seed=3)


def chunks_of(stream_id: str, codes: torch.Tensor, context: int = CONTEXT) -> list[StreamChunk]:
    """The engine's chunks of one utterance, each with up to `context` frames of left context."""
    bounds = ramp_bounds(codes.shape[0])
    return [StreamChunk(stream_id, codes[start - min(context, start): end], min(context, start), start,
                        is_last=(end == codes.shape[0])) for start, end in bounds]


# ------------------------------------------------------------------ the store


def test_a_state_continues_only_the_chunk_that_starts_where_it_stopped():
    store = CodecStateStore(CodecStateLimits())
    store.put("a", state_of(10), num_frames=6)
    assert store.take("a", 5) is None and "a" not in store  # a gap: dropped, rebuilt by the caller
    store.put("a", state := state_of(10), num_frames=6)
    assert store.take("a", 6) is state and store.num_states == 0
    assert store.take("b", 0) is None
    c = store.counters
    assert (c.num_hits, c.num_gaps, c.num_misses) == (1, 1, 1)


def test_least_recently_used_states_go_first_beyond_max_states():
    store = CodecStateStore(CodecStateLimits(max_states=2))
    store.put("a", state_of(1), 2)
    store.put("b", state_of(1), 2)
    store.put("a", state_of(1), 6)  # a is used again: b is now the oldest
    store.put("c", state_of(1), 2)
    assert "b" not in store and "a" in store and "c" in store and store.counters.num_evicted == 1


def test_bytes_are_counted_and_bounded():
    store = CodecStateStore(CodecStateLimits(max_bytes=250))
    for sid in "abc":
        store.put(sid, state_of(100), 2)
    assert store.num_states == 2 and store.num_bytes == 200 and "a" not in store
    store.put("b", state_of(30), 6)  # replacing a stream's state replaces its bytes
    assert store.num_bytes == 130
    assert store.free("b") and not store.free("b") and store.num_bytes == 100
    store.take("c", 2)
    assert store.num_bytes == 0 and store.counters.num_freed == 1


def test_idle_states_expire():
    clock = FakeClock()
    store = CodecStateStore(CodecStateLimits(idle_timeout_s=10.0), clock)
    store.put("old", state_of(1), 2)
    clock.now = 6.0
    store.put("new", state_of(1), 2)
    clock.now = 10.5
    assert store.expire_idle() == 1 and "old" not in store and "new" in store
    assert store.counters.num_expired == 1


@pytest.mark.parametrize("bad", [dict(max_states=0), dict(max_bytes=0), dict(idle_timeout_s=0.0)])
def test_limits_are_validated(bad):
    with pytest.raises(ValueError):
        CodecStateLimits(**bad)


# ------------------------------------------------------------------ the runner


def test_off_the_runner_decodes_windows_exactly_as_before(codec):
    runner = CodecRunner(codec)
    assert runner.states is None
    codes = random_codes(60, seed=8)
    chunks = chunks_of("a", codes)
    via_chunks = runner.decode_chunks(chunks)
    via_windows = codec.decode_windows([(c.codes, c.context_frames) for c in chunks])
    assert all(torch.equal(a, b) for a, b in zip(via_chunks, via_windows))
    assert not runner.release_stream("a")


def test_a_codec_without_streaming_state_stays_windowed(codec, monkeypatch):
    monkeypatch.setattr(type(codec), "supports_streaming_state", False)
    assert CodecRunner(codec, stream_states=CodecStateLimits()).states is None


def test_a_stream_through_the_stateful_runner_equals_the_full_decode(codec):
    runner = CodecRunner(codec, stream_states=CodecStateLimits())
    codes = random_codes(150, seed=9)
    full = codec.decode(codes[None])[0]
    audio = torch.cat([runner.decode_chunks([chunk])[0] for chunk in chunks_of("a", codes)])
    torch.testing.assert_close(audio, full, atol=STREAM_ATOL, rtol=0)
    counters = runner.states.counters
    assert (counters.num_misses, counters.num_hits) == (1, len(ramp_bounds(150)) - 1)
    assert runner.states.num_states == 0  # the last chunk freed the stream's state


def test_a_gap_falls_back_to_the_window_then_continues_exactly(codec):
    # chunk 4 goes to the other lane: chunk 5 finds a state at the wrong frame and rebuilds from its window
    runner = CodecRunner(codec, stream_states=CodecStateLimits())
    codes = random_codes(120, seed=10)
    chunks = chunks_of("a", codes)
    before = [runner.decode_chunks([c])[0] for c in chunks[:4]]
    skipped, rebuilt, *after = chunks[4:]
    audio = [runner.decode_chunks([c])[0] for c in [rebuilt] + after]
    assert runner.states.counters.num_gaps == 1
    (windowed,) = codec.decode_windows([(rebuilt.codes, rebuilt.context_frames)])
    torch.testing.assert_close(audio[0], windowed, atol=STREAM_ATOL, rtol=0)
    # from then on the stream continues the state built over the window: a decode from its first frame
    origin = rebuilt.start_frame - rebuilt.context_frames
    reference = codec.decode(codes[None, origin:])[0][(rebuilt.start_frame - origin) * SPF:]
    torch.testing.assert_close(torch.cat(audio), reference, atol=STREAM_ATOL, rtol=0)
    full = codec.decode(codes[None])[0]
    torch.testing.assert_close(torch.cat(before), full[: skipped.start_frame * SPF], atol=STREAM_ATOL, rtol=0)


def test_interleaved_streams_in_mixed_batches_each_equal_their_full_decode(codec):
    # three streams started at different times share batches: rows at different positions and sizes
    runner = CodecRunner(codec, stream_states=CodecStateLimits())
    streams = {sid: chunks_of(sid, random_codes(90, seed=11 + i)) for i, sid in enumerate("abc")}
    offsets = {"a": 0, "b": 2, "c": 5}  # stream s sends its chunk k in batch k + offset
    decoded = {sid: [] for sid in streams}
    for step in range(max(len(c) + offsets[s] for s, c in streams.items())):
        batch = [(sid, chunks[step - offsets[sid]]) for sid, chunks in streams.items()
                 if 0 <= step - offsets[sid] < len(chunks)]
        for (sid, _), audio in zip(batch, runner.decode_chunks([chunk for _, chunk in batch])):
            decoded[sid].append(audio)
    for sid, chunks in streams.items():
        codes = torch.cat([chunks[0].codes] + [c.codes[c.context_frames:] for c in chunks[1:]])
        torch.testing.assert_close(torch.cat(decoded[sid]), codec.decode(codes[None])[0], atol=STREAM_ATOL, rtol=0)


def test_an_evicted_stream_falls_back_and_stays_correct(codec):
    runner = CodecRunner(codec, stream_states=CodecStateLimits(max_states=1))
    a, b = [[replace(c, is_last=False) for c in chunks_of(sid, random_codes(40, seed))]
            for sid, seed in (("a", 12), ("b", 13))]
    for chunk_a, chunk_b in zip(a, b):  # each stream evicts the other's state
        audio_a, = runner.decode_chunks([chunk_a])
        audio_b, = runner.decode_chunks([chunk_b])
        (windowed_b,) = codec.decode_windows([(chunk_b.codes, chunk_b.context_frames)])
        torch.testing.assert_close(audio_b, windowed_b, atol=STREAM_ATOL, rtol=0)
    assert runner.states.counters.num_evicted >= len(a) - 1 and runner.states.counters.num_hits == 0


def test_release_stream_frees_a_cancelled_stream(codec):
    runner = CodecRunner(codec, stream_states=CodecStateLimits())
    runner.decode_chunks(chunks_of("a", random_codes(30, seed=14))[:2])
    assert runner.states.num_states == 1 and runner.states.num_bytes == codec.new_stream_state().num_bytes
    assert runner.release_stream("a") and runner.states.num_states == 0 and runner.states.num_bytes == 0


def test_a_failed_decode_puts_the_taken_states_back(codec, monkeypatch):
    # the lane answers the batch's chunks with an error and retries each alone: no stream loses its state
    runner = CodecRunner(codec, stream_states=CodecStateLimits())
    a, b = chunks_of("a", random_codes(40, seed=18)), chunks_of("b", random_codes(40, seed=19))
    runner.decode_chunks([a[0], b[0]])
    decode_stream = runner._decode_stream
    monkeypatch.setattr(runner, "_decode_stream", lambda *args: (_ for _ in ()).throw(RuntimeError("boom")))
    with pytest.raises(RuntimeError, match="boom"):
        runner.decode_chunks([a[1], b[1]])
    monkeypatch.setattr(runner, "_decode_stream", decode_stream)
    assert runner.states.num_states == 2
    runner.decode_chunks([a[1], b[1]])
    assert runner.states.counters.num_hits == 4 and runner.states.counters.num_misses == 2


def background_chunks(num_frames: int, seed: int) -> list[StreamChunk]:
    """One utterance's chunks as the background lane sees them in `voxlane` mode: chunk 0 went urgent."""
    return chunks_of("s", random_codes(num_frames, seed))[1:]


@pytest.mark.parametrize("stateful, ratio", [(False, 3.5), (True, 1.0)])
def test_decoded_frames_per_new_frame_in_the_steady_state(codec, stateful, ratio):
    # steady state: from frame 34 on, chunks hold 10 frames and windows their full 25 frames of context
    runner = CodecRunner(codec, stream_states=CodecStateLimits() if stateful else None)
    chunks = background_chunks(154, seed=15)  # chunks end on a 10-frame boundary: no short last chunk
    for chunk in chunks:
        if chunk.start_frame == 34:
            runner.frames.num_decoded = runner.frames.num_new = 0
        runner.decode_chunks([chunk])
    assert runner.frames.num_new == 120
    assert runner.frames.decoded_per_new == ratio


def test_two_chunks_of_one_stream_in_one_batch(codec):
    # the second finds no state yet (the first holds it): it decodes its window, and the stream goes on
    runner = CodecRunner(codec, stream_states=CodecStateLimits())
    codes = random_codes(70, seed=16)
    chunks = chunks_of("a", codes)
    for chunk in chunks[:3]:
        runner.decode_chunks([chunk])
    together = runner.decode_chunks(chunks[3:5])
    (windowed,) = codec.decode_windows([(chunks[4].codes, chunks[4].context_frames)])
    full = codec.decode(codes[None])[0]
    torch.testing.assert_close(together[0], full[chunks[3].start_frame * SPF: chunks[4].start_frame * SPF],
                               atol=STREAM_ATOL, rtol=0)
    torch.testing.assert_close(together[1], windowed, atol=STREAM_ATOL, rtol=0)
    runner.decode_chunks([chunks[5]])
    assert runner.states.counters.num_hits == 4  # chunks 1, 2, 3 and 5


# ------------------------------------------------------------------ CUDA

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
CUDA_ATOL = 1e-4  # fp32 without TF32, as the windowed graphs' test: other kernels, the same arithmetic


@needs_cuda
def test_stream_graph_replay_equals_the_eager_stream_decode(no_tf32):
    cuda = Qwen3TTSCodec.from_config(CODEC_CONFIG, device="cuda", seed=3)
    runner = CodecRunner(cuda, stream_states=CodecStateLimits())
    assert runner.stream_graphs is not None and runner.graphs is None
    runner.warm_up()
    codes = random_codes(120, seed=17).cuda()
    # ragged rows at different positions, a padded batch, and one shape beyond the largest bucket
    for starts, lengths in (([0, 13, 90], [2, 10, 7]), ([5], [10]), ([0] * 5, [35] * 5), ([0], [60])):
        states = [cuda.decode_stream([cuda.new_stream_state()], [codes[:s]])[1][0] if s else cuda.new_stream_state()
                  for s in starts]
        rows = [codes[s: s + n] for s, n in zip(starts, lengths)]
        graphed, graphed_states = runner.stream_graphs.decode_stream(states, rows)
        eager, eager_states = cuda.decode_stream(states, rows)
        for g, e, gs, es in zip(graphed, eager, graphed_states, eager_states):
            torch.testing.assert_close(g, e, atol=CUDA_ATOL, rtol=0)
            for key, tensor in es.tensors.items():
                torch.testing.assert_close(gs.tensors[key], tensor, atol=CUDA_ATOL, rtol=1e-4)


@needs_cuda
def test_a_stream_through_the_graphed_stateful_runner_equals_the_full_decode_on_cpu(codec, no_tf32):
    cuda = Qwen3TTSCodec.from_config(CODEC_CONFIG, device="cuda", seed=3)
    runner = CodecRunner(cuda, stream_states=CodecStateLimits())
    runner.warm_up()
    codes = random_codes(150, seed=9)
    chunks = [replace(c, codes=c.codes.cuda()) for c in chunks_of("a", codes)]
    audio = torch.cat([runner.decode_chunks([chunk])[0] for chunk in chunks]).cpu()
    torch.testing.assert_close(audio, codec.decode(codes[None])[0], atol=CUDA_ATOL, rtol=0)
    assert runner.states.counters.num_hits == len(chunks) - 1


def test_a_prefix_before_frame_0_is_left_context_the_state_carries_on(codec):
    # an in-context clone: the reference's codes come before the answer's frame 0 (Sequence.codec_prefix)
    runner = CodecRunner(codec, stream_states=CodecStateLimits())
    prefix, codes = random_codes(CONTEXT, seed=11), random_codes(60, seed=12)
    bounds = ramp_bounds(codes.shape[0])
    chunks = [StreamChunk("a", torch.cat((prefix, codes[:bounds[0][1]])), CONTEXT, 0)] + chunks_of("a", codes)[1:]
    audio = torch.cat([runner.decode_chunks([chunk])[0] for chunk in chunks])
    full = codec.decode(torch.cat((prefix, codes))[None])[0, CONTEXT * codec.samples_per_frame:]
    torch.testing.assert_close(audio, full, atol=STREAM_ATOL, rtol=0)  # as the reference decodes, cut
    assert runner.states.counters.num_hits == len(bounds) - 1
    with pytest.raises(ValueError, match="leave no new frame"):
        StreamChunk("a", codes[:2], 2, 0)  # all context, no new frame


def test_an_early_window_with_the_whole_prefix_equals_the_state_path(codec):
    # chunk 1 of an in-context clone decoded by the other lane (no state): its window holds chunk 0's prefix
    # and the frames since (ChunkCutter.window), so it gives the audio the state path gives
    runner = CodecRunner(codec, stream_states=CodecStateLimits())
    prefix, codes = random_codes(CONTEXT, seed=13), random_codes(12, seed=14)
    first = StreamChunk("a", torch.cat((prefix, codes[:2])), CONTEXT, 0)
    second = StreamChunk("a", torch.cat((prefix, codes[:6])), CONTEXT + 2, 2)
    via_state = runner.decode_chunks([first])[0], runner.decode_chunks([replace(second, codes=second.codes[CONTEXT:],
                                                                                context_frames=2)])[0]
    via_window = codec.decode_windows([(second.codes, second.context_frames)])[0]
    torch.testing.assert_close(via_window, via_state[1], atol=STREAM_ATOL, rtol=0)
    assert runner.states.counters.num_hits == 1
