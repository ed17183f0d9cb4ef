"""The background codec lane's Triton glue (backend_python/codec/model.py) on the fake pb_utils with TontaubeV1's tiny
codec and stream states on: requests with their stream places decode from each stream's VibeVoice state, several
streams in one `execute`; a stream's state is freed by its last chunk, and a cancelled stream's (whose end the
lane never hears of) by the idle timeout; a batch whose decode fails is retried chunk by chunk and no stream
loses its state; a reloaded lane (a new model: the dead one's states are gone) rebuilds each stream's state from
its next window at once."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from tests.unit.test_tontaube_codec import WINDOW_TOLERANCE, engine_chunks, random_codes

MAX_TOLERANCE = WINDOW_TOLERANCE[True][0]


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def lane(pb):
    """A background codec lane serving tontaube-tiny, initialised as Triton would."""
    from backend_python.codec.model import CodecModel
    model = CodecModel()
    parameters = {"model": "tontaube-tiny", "stream_states": "true", "device": "cpu", "dtype": "float32"}
    model.initialize({"model_config": json.dumps({"parameters": {k: {"string_value": v}
                                                                  for k, v in parameters.items()}})})
    return model


@pytest.fixture
def model(pb):
    codec_lane = lane(pb)
    yield codec_lane
    codec_lane._heap.stop()


def request(pb, chunk):
    inputs = [pb.Tensor("codes", chunk.codes[None].numpy().astype(np.int32)),
              pb.Tensor("context_frames", np.array([[chunk.context_frames]], dtype=np.int32)),
              pb.Tensor("stream_id", np.array([[chunk.stream_id.encode()]], dtype=np.object_)),
              pb.Tensor("start_frame", np.array([[chunk.start_frame]], dtype=np.int32)),
              pb.Tensor("is_last", np.array([[chunk.is_last]], dtype=np.bool_))]
    if chunk.lookahead_frames:
        inputs.append(pb.Tensor("lookahead_frames", np.array([[chunk.lookahead_frames]], dtype=np.int32)))
    return pb.Request(inputs)


def audio_of(pb, response) -> torch.Tensor:
    assert not response.has_error(), response.error().message()
    return torch.from_numpy(pb.get_output_tensor_by_name(response, "audio").as_numpy()[0])


def streams_of(model, num_streams: int, num_frames: int = 150):
    codes = [random_codes(num_frames, 30 + s) for s in range(num_streams)]
    chunks = [engine_chunks(f"s{s}", c, model.codec.shape.window) for s, c in enumerate(codes)]
    return codes, chunks


def test_streams_decode_from_their_states_in_one_call_and_their_last_chunks_free_them(pb, model):
    codes, chunks = streams_of(model, 2)
    assert model.runner.states is not None and model.codec.state_reads_windows
    audio = [[], []]
    for step in range(len(chunks[0])):
        responses = model.execute([request(pb, c[step]) for c in chunks])
        assert [pb.get_output_tensor_by_name(r, "batch_size").as_numpy()[0, 0] for r in responses] == [2, 2]
        for s, response in enumerate(responses):
            audio[s].append(audio_of(pb, response))
    for s in range(2):
        whole = model.codec.decode(codes[s][None])[0]
        assert (torch.cat(audio[s]) - whole).abs().max() <= MAX_TOLERANCE
    counters = model.runner.states.counters
    assert counters.num_hits == 2 * (len(chunks[0]) - 1) and model.runner.states.num_states == 0


def test_a_cancelled_stream_s_state_expires_and_the_others_stay(pb, model):
    clock = FakeClock()
    model.runner.states._clock = clock  # the lane's monotonic clock, made a test's
    _, chunks = streams_of(model, 2)
    model.execute([request(pb, c[0]) for c in chunks])
    clock.now = 20.0
    model.execute([request(pb, chunks[1][1])])  # stream 0 was cancelled: the router sends it nothing more
    clock.now = 35.0  # past the idle timeout (30 s) for stream 0 only
    model.execute([request(pb, chunks[1][2])])
    assert "s0" not in model.runner.states and "s1" in model.runner.states
    assert model.runner.states.counters.num_expired == 1


def test_a_failed_batch_is_retried_alone_and_every_stream_keeps_its_state(pb, model, monkeypatch):
    codes, chunks = streams_of(model, 3)
    for step in range(3):
        model.execute([request(pb, c[step]) for c in chunks])
    dualcodec_audio = model.codec.dualcodec_audio

    def fails_batched(batch):  # a batch too large for the device, say: each chunk alone fits
        if batch.shape[0] > 1:
            raise RuntimeError("out of memory")
        return dualcodec_audio(batch)
    monkeypatch.setattr(model.codec, "dualcodec_audio", fails_batched)
    responses = model.execute([request(pb, c[3]) for c in chunks])
    monkeypatch.setattr(model.codec, "dualcodec_audio", dualcodec_audio)
    pieces = [audio_of(pb, r) for r in responses]
    assert model.runner.states.counters.num_misses == 3 and model.runner.states.num_states == 3  # no rebuild
    for s, piece in enumerate(pieces):
        start = chunks[s][3].start_frame * 1920
        whole = model.codec.decode(codes[s][None])[0][start:start + piece.shape[0]]
        assert (piece - whole).abs().max() <= MAX_TOLERANCE


def test_a_reloaded_lane_rebuilds_each_stream_from_its_next_window(pb, model):
    codes, chunks = streams_of(model, 2)
    for step in range(4):
        model.execute([request(pb, c[step]) for c in chunks])
    model._heap.stop()
    reloaded = lane(pb)  # the dead lane's states died with it
    try:
        audio = [[], []]
        for step in range(4, len(chunks[0])):
            for s, response in enumerate(reloaded.execute([request(pb, c[step]) for c in chunks])):
                audio[s].append(audio_of(pb, response))
        counters = reloaded.runner.states.counters
        assert counters.num_misses == 2 and counters.num_hits == 2 * (len(chunks[0]) - 5)
        for s in range(2):
            start = chunks[s][4].start_frame * 1920
            whole = reloaded.codec.decode(codes[s][None])[0][start:]
            assert (torch.cat(audio[s]) - whole).abs().max() <= MAX_TOLERANCE
    finally:
        reloaded._heap.stop()
