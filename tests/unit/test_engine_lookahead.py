"""Codec lookahead and multi-token LM steps in the engine: chunks wait for the frames after them and carry
them, the overlap and the codec condition travel with each chunk, and a model that emits several frames per
step gives the frames a one-frame-per-step model gives."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from backend_python.engine.codec_runner import CodecRunner, StreamChunk, decode_windowed
from backend_python.models.base import Codec, CodecShape, DecodeBatch
from backend_python.vox_ensemble.overlap_join import OverlapJoin, crossfade_weights
from tests.unit.test_engine import lm, make_engine, make_seq, run_until_done  # noqa: F401 (lm: fixture)


def serve(lm, frames: int, **overrides):
    engine = make_engine(lm, **overrides)
    seq, sink = make_seq(lm, "Hello there, lookahead.", frames=frames)
    engine.add(seq)
    run_until_done(engine, [sink])
    assert sink.error is None
    return engine, seq, sink


def test_a_chunk_waits_for_its_lookahead_and_carries_it(lm):
    _, seq, sink = serve(lm, 14, codec_lookahead_frames=3, codec_overlap_frames=1)
    frames = torch.stack(seq.frames)
    assert [c.num_new_frames for c in sink.chunks] == [2, 5, 5, 2]  # the same plan as without lookahead
    assert [c.lookahead_frames for c in sink.chunks] == [3, 3, 2, 0]  # the last ones: what exists at the end
    assert [c.overlap_frames for c in sink.chunks] == [1, 1, 1, 0]
    for chunk in sink.chunks:
        start, end = chunk.start_frame, chunk.start_frame + chunk.num_new_frames
        torch.testing.assert_close(chunk.tokens, frames[start - chunk.context_frames: end + chunk.lookahead_frames],
                                   rtol=0, atol=0)


def test_with_lookahead_the_first_chunk_leaves_only_once_its_lookahead_exists(lm):
    engine = make_engine(lm, codec_lookahead_frames=3)
    seq, sink = make_seq(lm, "Hello.", frames=40)
    engine.add(seq)
    engine._collect(0)
    while not sink.chunks:
        engine.step()
    assert seq.num_frames == 2 + 3  # first chunk (2 frames) plus its lookahead, not before
    assert sink.chunks[0].tokens.shape[0] == 5


def test_without_lookahead_chunks_are_as_before(lm):
    _, _, sink = serve(lm, 13)
    assert [c.lookahead_frames for c in sink.chunks] == [0, 0, 0, 0]
    assert [c.num_new_frames for c in sink.chunks] == [2, 5, 5, 1]


class ConditionedLM:
    """The tiny LM, with a codec condition per prompt (a flow decoder's speaker embedding)."""

    def __init__(self, inner) -> None:
        self._inner = inner

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def codec_condition(self, prompt):
        return torch.full((4,), float(prompt.num_tokens))


def test_each_chunk_carries_the_streams_codec_condition(lm):
    _, seq, sink = serve(ConditionedLM(lm), 9)
    expected = torch.full((4,), float(seq.prompt.num_tokens))
    assert all(torch.equal(c.condition, expected) for c in sink.chunks)


class MultiFrameLM:
    """The tiny LM emitting M frames per step (its decode run M times): as a model with MTP heads returns
    them, codes [B, M, K] and is_eos [B, M]; `eos_at` forces an end of speech at a request's frame index."""

    def __init__(self, inner, frames_per_step: int, eos_at: int | None = None) -> None:
        self._inner, self.frames_per_step, self._eos_at = inner, frames_per_step, eos_at
        self._emitted: dict[int, int] = {}

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def prefill(self, slot, prompt):
        self._emitted[slot] = 0
        return self._inner.prefill(slot, prompt)

    def prefill_batch(self, slots, prompts):
        for slot in slots:
            self._emitted[slot] = 0
        return self._inner.prefill_batch(slots, prompts)

    def decode(self, batch: DecodeBatch):
        steps = [self._inner.decode(batch) for _ in range(self.frames_per_step)]
        codes = torch.stack([c for c, _ in steps], dim=1)
        is_eos = torch.stack([e for _, e in steps], dim=1)
        if self._eos_at is not None:
            for row, slot in enumerate(batch.slots):
                index = self._eos_at - self._emitted[slot]
                if 0 <= index < self.frames_per_step:
                    is_eos[row, index] = True
                self._emitted[slot] += self.frames_per_step
        return codes, is_eos


@pytest.mark.parametrize("overlap", [False, True])
def test_several_frames_per_step_give_the_frames_of_one_per_step(lm, overlap):
    _, plain, _ = serve(lm, 11, overlap_steps=overlap, overlap_min_rows=1)
    engine, multi, sink = serve(MultiFrameLM(lm, 3), 11, overlap_steps=overlap, overlap_min_rows=1)  # 11: the cap cuts a step short
    assert multi.num_frames == 11
    torch.testing.assert_close(torch.stack(multi.frames), torch.stack(plain.frames), rtol=0, atol=0)
    assert sum(c.num_new_frames for c in sink.chunks) == 11
    assert sorted(engine.scheduler.free_slots) == [0, 1, 2, 3]


def test_an_end_of_speech_inside_a_step_drops_the_frames_after_it(lm):
    engine = make_engine(MultiFrameLM(lm, 3, eos_at=7))
    seq, sink = make_seq(lm, "Hello.", frames=40)
    seq.ignore_eos = False
    engine.add(seq)
    run_until_done(engine, [sink])
    assert sink.error is None and seq.num_frames == 7  # frames 0..6; 7 is the end, 8 is dropped
    assert sum(c.num_new_frames for c in sink.chunks) == 7


class RampCodec(Codec):
    """A codec whose sample values name their frame (frame i -> samples of value i + 1), with lookahead."""

    def __init__(self, lookahead: int, overlap: int) -> None:
        super().__init__()
        self.shape = CodecShape(1, 100, 8000, 4, 2, lookahead, overlap)
        self.anchor = torch.nn.Parameter(torch.zeros(1))

    def decode(self, codes):
        return codes[..., 0].float().repeat_interleave(4, dim=1) + 1


def test_a_windowed_decode_keeps_the_new_frames_and_the_overlap():
    codec = RampCodec(lookahead=3, overlap=2)
    codes = torch.arange(10)[:, None]
    chunks = [StreamChunk("s", codes[0:7], 2, 2, lookahead_frames=3),  # context 0-1, new 2-3, lookahead 4-6
              StreamChunk("s", codes[5:10], 2, 7, lookahead_frames=1)]  # new 7-8, one frame of lookahead
    for decoder in (codec, CodecRunner(codec, use_cuda_graphs=False)):
        first, second = decode_windowed(decoder, chunks)
        torch.testing.assert_close(first, torch.tensor([3.0] * 4 + [4.0] * 4 + [5.0] * 4 + [6.0] * 4))
        torch.testing.assert_close(second, torch.tensor([8.0] * 4 + [9.0] * 4 + [10.0] * 4))


def test_a_codec_without_a_condition_refuses_one():
    codec = RampCodec(lookahead=0, overlap=0)
    with pytest.raises(ValueError, match="takes no condition"):
        codec.decode_windows([(torch.zeros(3, 1, dtype=torch.long), 0)], [torch.zeros(4)])


def test_the_overlap_join_sends_new_samples_only_and_fades_the_tail_in():
    join = OverlapJoin()
    first = join.join(np.concatenate([np.ones(8, np.float32), np.full(4, 5.0, np.float32)]), 4)
    np.testing.assert_array_equal(first, np.ones(8))  # nothing to fade into the first chunk
    second = join.join(np.concatenate([np.full(6, 3.0, np.float32), np.full(4, 7.0, np.float32)]), 4)
    weights = crossfade_weights(4)
    np.testing.assert_allclose(second[:4], 5.0 * (1 - weights) + 3.0 * weights, rtol=1e-6)
    np.testing.assert_array_equal(second[4:], np.full(2, 3.0))
    last = join.join(np.full(2, 1.0, np.float32), 0)  # shorter than the tail: fades over what there is
    np.testing.assert_allclose(last, 7.0 * (1 - crossfade_weights(2)) + crossfade_weights(2), rtol=1e-6)
    assert crossfade_weights(16)[0] < 0.01 and crossfade_weights(16)[-1] > 0.99


def test_the_overlap_join_leaves_a_seamless_signal_unchanged():
    """When the tail equals how the next chunk starts (an exact decoder), the fade changes nothing."""
    signal = np.sin(np.arange(40, dtype=np.float32) / 3)
    join = OverlapJoin()
    out = np.concatenate([join.join(signal[0:14], 4), join.join(signal[10:30], 4), join.join(signal[26:40], 0)])
    np.testing.assert_allclose(out, signal, atol=1e-6)


class PlacedCodec(RampCodec):
    """Records the start frames it is given (a flow decoder lays its noise out by stream position)."""

    uses_stream_position = True

    def __init__(self) -> None:
        super().__init__(lookahead=0, overlap=0)
        self.start_frames = []

    def decode_windows(self, windows, conditions=None, start_frames=None):
        self.start_frames.append(start_frames)
        return super().decode_windows(windows, conditions)


def test_a_codec_that_uses_stream_position_gets_each_windows_start_frame():
    codec = PlacedCodec()
    codes = torch.arange(12)[:, None]
    chunks = [StreamChunk("a", codes[0:2], 0, 0), StreamChunk("b", codes[3:9], 2, 5)]
    decode_windowed(codec, chunks)
    decode_windowed(CodecRunner(codec, use_cuda_graphs=False), chunks)
    assert codec.start_frames == [[0, 5], [0, 5]]
    decode_windowed(RampCodec(0, 0), chunks)  # a codec that does not: no start frames, no error


def test_an_eager_codec_on_cuda_turns_cudnn_benchmark_off(monkeypatch):
    """Its windows vary in batch and length: benchmark mode would tune every new shape (seconds per call)."""
    codec = RampCodec(lookahead=0, overlap=0)
    monkeypatch.setattr(type(codec), "device", property(lambda self: torch.device("cuda")))
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", True)
    CodecRunner(codec, use_cuda_graphs=True)  # RampCodec cannot be graphed: eager
    assert torch.backends.cudnn.benchmark is False
    monkeypatch.setattr(type(codec), "device", property(lambda self: torch.device("cpu")))
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", True)
    CodecRunner(codec)
    assert torch.backends.cudnn.benchmark is True  # not on the CPU: nothing to decide there


def chunk_sizes_beside_load(lm, **chunking) -> list[list[int]]:
    """Three requests: one alone, then two more admitted in one round beside it -> each one's chunk sizes."""
    from scheduler import ChunkingConfig, SchedulerConfig, AdmissionPolicyName
    config = ChunkingConfig(first_chunk_frames=2, chunk_frames=6, chunk_growth=2.0, first_chunk_frames_idle=1,
                            first_chunk_frames_busy=4, busy_streams=2, **chunking)
    engine = make_engine(lm, scheduler=SchedulerConfig(chunking=config,
                                                        admission_policy=AdmissionPolicyName.PREFILL_FIRST))
    pairs = [make_seq(lm, f"Request {i}.", frames=12, seed=i) for i in range(3)]
    engine.add(pairs[0][0])  # alone
    engine._collect(0)
    engine.step()
    engine.add(pairs[1][0])  # beside one running stream
    engine.add(pairs[2][0])  # beside two (admitted in the same round)
    run_until_done(engine, [sink for _, sink in pairs])
    return [[c.num_new_frames for c in sink.chunks] for _, sink in pairs]


def test_the_first_chunk_follows_the_load_when_the_request_starts(lm):
    """Alone: the idle size; beside `busy_streams` running streams: the busy size; the ramp grows from it. With no
    room asked for (`first_chunk_room` 0), one beside a running stream takes the default."""
    from scheduler import ChunkingConfig
    assert chunk_sizes_beside_load(lm, first_chunk_room=0.0) == [[1, 2, 4, 5], [2, 4, 6], [4, 6, 2]]
    assert ChunkingConfig().first_chunk_frames_for(0) == 2  # off by default: one first size whatever the load


def test_the_idle_first_chunk_goes_to_a_request_beside_others_while_the_lm_has_room(lm):
    """The room rule reads the engine's measured step time: with any step leaving room (a tiny margin), the request
    beside one running stream takes the idle first chunk too; past busy_streams the coarser plan, its steady chunk
    included (`chunk_frames_busy`)."""
    assert chunk_sizes_beside_load(lm, first_chunk_room=1e-9) == [[1, 2, 4, 5], [1, 2, 4, 5], [4, 6, 2]]
    assert chunk_sizes_beside_load(lm, first_chunk_room=1e-9, chunk_frames_busy=8) == [[1, 2, 4, 5], [1, 2, 4, 5],
                                                                                        [4, 8]]
    assert chunk_sizes_beside_load(lm, first_chunk_room=1e9)[1] == [2, 4, 6]  # no step leaves that much room
