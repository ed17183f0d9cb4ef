"""The router's call to the voice encoder lane: a request's reference audio -> the LM's reference inputs.

One plain (non-decoupled) BLS request per cloning request, made on the stream's worker thread before the LM
request, so the LM's loop never runs an encoder and every BLS call still gets exactly one response (docs/TRITON.md,
"Notes on the Python backend"). The lane's refusals are coded (`reference_unsupported` where the model's
family has no encoder) and pass on to the client as they are; a dead lane is taken out of service and
reloaded like the others (lane_health.py).
"""
from __future__ import annotations

import numpy as np
import triton_python_backend_utils as pb_utils

from backend_python.stub_common import bls
from backend_python.stub_common.lane_health import LaneHealth
from backend_python.stub_common.reference_inputs import ReferenceAudio
from protocol.models import VOICE_ENCODER
from protocol.reasons import Ended, EndReason
from protocol.tensors import REFERENCE_TENSORS, VOICE_SPEC
from protocol.voices import VoiceSpec
from protocol.wire import decode_error, is_encoded


class VoiceEncoderClient:
    def __init__(self, lane_health: LaneHealth) -> None:
        self._lane_health = lane_health

    def encode(self, reference: ReferenceAudio, parameters: dict) -> list | Ended:
        """The LM's inputs for `reference`: the encoder's tensors (without the batch dimension) and, for
        in-context cloning, `ref_text`; or why the stream cannot go on."""
        if (down := self._lane_health.unavailable(VOICE_ENCODER)) is not None:
            return down
        request = pb_utils.InferenceRequest(
            model_name=VOICE_ENCODER, requested_output_names=list(REFERENCE_TENSORS), parameters=parameters,
            inputs=[pb_utils.Tensor("ref_audio", reference.audio[None]),
                    pb_utils.Tensor("ref_sample_rate", np.array([[reference.sample_rate]], dtype=np.int32)),
                    pb_utils.Tensor("x_vector_only", np.array([[reference.x_vector_only]], dtype=np.bool_))])
        generation = self._lane_health.generation(VOICE_ENCODER)
        response = request.exec()
        if response.has_error():
            return self._on_call_error(response.error().message(), generation)
        # copies: as_numpy() views the response's shared memory, freed with the response
        tensors = [pb_utils.Tensor(t.name(), np.array(t.as_numpy()[0])) for t in response.output_tensors()
                   if t.name() in REFERENCE_TENSORS]
        if not tensors:  # the LM would speak without the voice: never silently
            return Ended(EndReason.INTERNAL, f"{VOICE_ENCODER} answered none of {list(REFERENCE_TENSORS)}")
        if reference.text is not None:
            tensors.append(pb_utils.Tensor("ref_text", np.array([reference.text.encode("utf-8")], dtype=np.object_)))
        return tensors

    def voice_spec(self) -> VoiceSpec | Ended:
        """What the served model's voices hold (the lane's encoder says), or why it cannot say."""
        if (down := self._lane_health.unavailable(VOICE_ENCODER)) is not None:
            return down
        request = pb_utils.InferenceRequest(  # the lane's required inputs, which it ignores here
            model_name=VOICE_ENCODER, requested_output_names=[VOICE_SPEC], parameters={VOICE_SPEC: True},
            inputs=[pb_utils.Tensor("ref_audio", np.zeros((1, 1), dtype=np.float32)),
                    pb_utils.Tensor("ref_sample_rate", np.array([[16000]], dtype=np.int32))])
        generation = self._lane_health.generation(VOICE_ENCODER)
        response = request.exec()
        if response.has_error():
            return self._on_call_error(response.error().message(), generation)
        spec = pb_utils.get_output_tensor_by_name(response, VOICE_SPEC).as_numpy().reshape(-1)[0]
        return VoiceSpec.from_json(bytes(spec).decode("utf-8"))

    def _on_call_error(self, message: str, generation: int) -> Ended:
        if is_encoded(message):  # the lane's own answer: bad reference, no encoder, or its failure
            return decode_error(message)
        if (stopping := bls.stopping(VOICE_ENCODER, message)) is not None:
            return stopping
        if bls.triton_failure(message) is EndReason.LANE_DOWN:
            return self._lane_health.on_dead(VOICE_ENCODER, message, generation)
        return Ended(EndReason.INTERNAL, f"{VOICE_ENCODER} failed: {message}")
