"""The voice encoder lane's glue in-process (fake pb_utils, a fake VoiceEncoder): a dynamic batch of references
of different lengths and rates goes to `encode` as one list at the encoder's rate; a bad one is refused alone;
a family without an encoder refuses every request with `reference_unsupported`."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from protocol.reasons import EndReason
from protocol.wire import decode_error
from tests.reference_audio import voiced

ENCODER_RATE = 24000


@pytest.fixture
def lane(pb):
    import torch
    from torch import nn

    from backend_python.voice_encoder.model import VoiceEncoderModel
    from backend_python.models.base import VoiceEncoder
    from backend_python.stub_common.reference_inputs import ReferenceLimits
    from backend_python.stub_common.heap import HeapTrimmer

    class FakeEncoder(VoiceEncoder):
        reference_tensors = {"speaker_embedding": ("FP32", [4]), "ref_codes": ("INT32", [-1, 2])}

        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.zeros(1))
            self.batches = []  # (lengths, x_vector_only) of each encode call
            self.fails_on_length = None
            self.refuses_x_vector_at = None
            self.code_batches = []  # the lengths of each encode_codes call

        def encode_codes(self, audio):
            self.code_batches.append([a.numel() for a in audio])
            return [torch.full((a.numel() // 1920, 2), 3, dtype=torch.int64) for a in audio]

        @property
        def sample_rate(self) -> int:
            return ENCODER_RATE

        def encode(self, audio, x_vector_only):
            self.batches.append(([a.numel() for a in audio], list(x_vector_only)))
            if self.fails_on_length == "encode":
                raise RuntimeError("encoder blew up")
            if any(a.numel() == self.fails_on_length for a in audio):
                raise RuntimeError("encoder blew up")
            if any(x and a.numel() == self.refuses_x_vector_at for a, x in zip(audio, x_vector_only)):
                raise ValueError("this encoder clones in context only")
            return [{"speaker_embedding": torch.full((4,), float(a.numel())),
                     **({} if x else {"ref_codes": torch.ones(a.numel() // 1920, 2, dtype=torch.int32)})}
                    for a, x in zip(audio, x_vector_only)]

    model = VoiceEncoderModel.__new__(VoiceEncoderModel)
    model.encoder, model.unsupported, model.limits = FakeEncoder(), None, ReferenceLimits()
    model.trims = []
    model._heap = HeapTrimmer(trim=lambda: model.trims.append(1))  # not started: the test ticks it
    return model


def reference_request(pb, audio: np.ndarray, rate: int, x_vector_only: bool | None = None,
                      is_input_chunk: bool = False):
    tensors = [pb.Tensor("ref_audio", audio[None]), pb.Tensor("ref_sample_rate", np.array([[rate]], np.int32))]
    if x_vector_only is not None:
        tensors.append(pb.Tensor("x_vector_only", np.array([[x_vector_only]])))
    return pb.Request(tensors, parameters={"input_chunk": True} if is_input_chunk else None)


def outputs(response) -> dict[str, np.ndarray]:
    assert not response.has_error(), response.error().message()
    return {t.name(): t.as_numpy() for t in response.output_tensors()}


def test_a_batch_of_references_is_one_list_at_the_encoders_rate(pb, lane):
    requests = [reference_request(pb, voiced(1.0, 16000), 16000),
                reference_request(pb, voiced(2.0, 48000), 48000, x_vector_only=True),
                reference_request(pb, voiced(0.75, ENCODER_RATE), ENCODER_RATE, x_vector_only=False)]
    first, second, third = lane.execute(requests)
    (lengths, flags), = lane.encoder.batches
    assert [abs(n - expected) <= 1 for n, expected in zip(lengths, (24000, 48000, 18000))] == [True] * 3
    assert flags == [False, True, False]
    assert lane._heap.tick() and lane.trims == [1]  # the batch's freed heap goes back at the next tick
    first, second, third = outputs(first), outputs(second), outputs(third)
    assert first["speaker_embedding"].shape == (1, 4) and first["speaker_embedding"].dtype == np.float32
    assert first["ref_codes"].dtype == np.int64 and first["ref_codes"].shape == (1, 12, 2)  # INT32 -> the config's
    assert set(second) == {"speaker_embedding"}  # x-vector only: no codes
    assert third["ref_codes"].shape == (1, 9, 2)


def test_a_bad_request_is_refused_alone_and_the_batch_still_encodes(pb, lane):
    good, bad = lane.execute([reference_request(pb, voiced(1.0, 16000), 16000),
                              reference_request(pb, voiced(1.0, 16000), 4000)])
    assert outputs(good)["speaker_embedding"].shape == (1, 4)
    ended = decode_error(bad.error().message())
    assert (ended.param, ended.code) == ("ref_sample_rate", "unsupported_ref_sample_rate")


def test_a_reference_whose_encode_raises_fails_alone(pb, lane):
    lane.encoder.fails_on_length = 48000
    good, failed = lane.execute([reference_request(pb, voiced(1.0, 24000), 24000),
                                 reference_request(pb, voiced(2.0, 24000), 24000)])
    assert outputs(good)["speaker_embedding"][0, 0] == 24000.0
    ended = decode_error(failed.error().message())
    assert ended.reason is EndReason.INTERNAL and "encoder blew up" in ended.message


def test_a_reference_the_encoder_refuses_is_bad_input_alone(pb, lane):
    lane.encoder.refuses_x_vector_at = 24000
    refused, good = lane.execute([reference_request(pb, voiced(1.0, 24000), 24000, x_vector_only=True),
                                  reference_request(pb, voiced(1.0, 24000), 24000)])
    ended = decode_error(refused.error().message())
    assert (ended.reason, ended.param) == (EndReason.REFUSED_BAD_INPUT, "ref_audio")
    assert "clones in context only" in ended.message
    assert outputs(good)["ref_codes"].shape == (1, 12, 2)


def test_a_family_without_an_encoder_refuses_every_request(pb, lane):
    from protocol.reasons import Ended
    lane.unsupported = Ended(EndReason.REFUSED_BAD_INPUT, "cannot take reference audio", param="ref_audio",
                             code="reference_unsupported")
    responses = lane.execute([reference_request(pb, voiced(1.0, 16000), 16000)] * 2)
    assert [decode_error(r.error().message()) for r in responses] == [lane.unsupported] * 2
    assert lane.encoder.batches == []


VOICELESS = """
import json, sys
import numpy as np
from tests.middle import fake_pb_utils
sys.modules["triton_python_backend_utils"] = fake_pb_utils
from backend_python.voice_encoder.model import VoiceEncoderModel
lane = VoiceEncoderModel()
lane.initialize({"model_config": json.dumps({"parameters": {
    "model": {"string_value": "qwen3-tts-1.7b"}, "device": {"string_value": "cuda"}}})})
request = fake_pb_utils.Request([fake_pb_utils.Tensor("ref_audio", np.zeros((1, 16000), np.float32)),
                                 fake_pb_utils.Tensor("ref_sample_rate", np.array([[16000]], np.int32))])
[response] = lane.execute([request])
lane.finalize()
print(json.dumps({"error": response.error().message(), "torch": "torch" in sys.modules}))
"""


def test_a_lane_whose_model_is_known_to_clone_no_voice_refuses_without_torch():
    """A CustomVoice Qwen3-TTS (named so): the lane loads neither torch nor the model, and answers as the loaded
    lane would."""
    done = subprocess.run([sys.executable, "-c", VOICELESS], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.splitlines()[-1])
    ended = decode_error(answer["error"])
    assert (ended.reason, ended.param, ended.code) == (EndReason.REFUSED_BAD_INPUT, "ref_audio", "reference_unsupported")
    assert "'qwen3-tts-1.7b' cannot take reference audio" in ended.message
    assert answer["torch"] is False


def test_an_encoder_with_undeclared_tensors_fails_at_load():
    from backend_python.voice_encoder.model import check_declared
    check_declared({"speaker_embedding": ("FP32", [4]), "ref_codes": ("INT64", [-1, 16])})
    with pytest.raises(ValueError, match="'prosody'"):
        check_declared({"speaker_embedding": ("FP32", [4]), "prosody": ("FP32", [8])})


def test_input_chunks_are_coded_in_one_call_without_the_speaker_and_a_reference_beside_them_still_encodes(pb, lane):
    """An audio-in stream's input chunks (the router's `input_chunk` parameter) need only their codes: they go to
    `encode_codes` as one list, never to `encode`; a reference in the same dynamic batch is encoded as always."""
    lane.encoder.fails_on_length = "encode"  # the default encode_codes would go through encode: it must not
    chunk = (np.random.default_rng(0).uniform(-0.5, 0.5, 16 * 1920)).astype(np.float32)
    responses = lane.execute([reference_request(pb, chunk, ENCODER_RATE, is_input_chunk=True),
                              reference_request(pb, chunk[:4 * 1920], ENCODER_RATE, is_input_chunk=True),
                              reference_request(pb, chunk, ENCODER_RATE, is_input_chunk=True)])
    assert lane.encoder.batches == [] and lane.encoder.code_batches == [[16 * 1920, 4 * 1920, 16 * 1920]]
    codes = [outputs(r) for r in responses]
    assert [set(c) for c in codes] == [{"ref_codes"}] * 3  # no speaker embedding
    assert [c["ref_codes"].shape for c in codes] == [(1, 16, 2), (1, 4, 2), (1, 16, 2)]
    lane.encoder.fails_on_length = None
    reference, chunk_codes = lane.execute([reference_request(pb, voiced(1.0, 24000), 24000),
                                           reference_request(pb, chunk, ENCODER_RATE, is_input_chunk=True)])
    assert set(outputs(reference)) == {"speaker_embedding", "ref_codes"} and set(outputs(chunk_codes)) == {"ref_codes"}
    assert lane.encoder.batches == [([24000], [False])] and lane.encoder.code_batches[-1] == [16 * 1920]
