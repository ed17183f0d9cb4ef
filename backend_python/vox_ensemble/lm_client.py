"""The router's calls to the LM lane: start a stream, cancel one, and the BLS iterators they leave.

A stream starts with one decoupled BLS request to `speechlm_lm` naming the router's chunk channel;
its one response is the final flag, with `error` when the LM refused (chunk_channel.py says why the
chunks do not follow on that stream). Triton 2.51 cannot cancel a BLS request, so a cancel is a
control request (`cancel` = true, the stream's request id), and so are a backpressure update
(`taken_frames`) and a streaming-text piece (`text_piece`, `text_final`). Every iterator is held a while after it
ends (graveyard.py) and freed in `release_all`.
"""
from __future__ import annotations

import numpy as np
import triton_python_backend_utils as pb_utils

from backend_python.stub_common import bls
from backend_python.vox_ensemble.graveyard import Graveyard
from backend_python.stub_common.lane_health import LaneHealth
from backend_python.vox_ensemble.stream import Job
from protocol.models import LM
from protocol.reasons import Ended, EndReason
from protocol.tensors import CANCEL, INPUT_CODES, INPUT_FINAL, TAKEN_FRAMES, TEXT_FINAL, TEXT_PIECE


class LMClient:
    def __init__(self, channel_parameters: dict[str, str], lane_health: LaneHealth) -> None:
        self._channel_parameters = channel_parameters
        self._lane_health = lane_health
        self._graveyard = Graveyard()

    def start(self, job: Job) -> Ended | None:
        """Hand the stream to the LM; None when it accepted, else why not."""
        request = pb_utils.InferenceRequest(
            model_name=LM, requested_output_names=["error"], inputs=job.inputs,
            request_id=job.stream_id, parameters=self._channel_parameters)
        generation = self._lane_health.generation(LM)
        responses = request.exec(decoupled=True)
        self._graveyard.hold(responses)
        for response in responses:
            if response.has_error():  # from Triton itself: the LM could not be reached
                return self._on_call_error(response.error().message(), generation)
            if (refused := bls.lm_refusal(response)) is not None:
                return refused
        return None

    def cancel(self, stream_id: str) -> None:
        """End the LM's stream `stream_id` (its client went away); its slot frees at the LM's next step.
        Unknown ids are ignored there."""
        self._control(stream_id, pb_utils.Tensor(CANCEL, np.array([True], dtype=np.bool_)))

    def send_text(self, stream_id: str, text: str, is_final: bool) -> None:
        """More of streaming-text stream `stream_id`'s text (whole characters); `is_final` closes it."""
        self._control(stream_id, pb_utils.Tensor(TEXT_PIECE, np.array([text.encode("utf-8")], dtype=np.object_)),
                      pb_utils.Tensor(TEXT_FINAL, np.array([is_final], dtype=np.bool_)))

    def send_input(self, stream_id: str, codes: np.ndarray | None, is_final: bool) -> None:
        """More of audio-in stream `stream_id`'s input frames (codes [N, K] INT32, none: no frames);
        `is_final` closes its input."""
        tensors = [pb_utils.Tensor(INPUT_FINAL, np.array([is_final], dtype=np.bool_))]
        if codes is not None and codes.size:
            tensors.insert(0, pb_utils.Tensor(INPUT_CODES, np.ascontiguousarray(codes, dtype=np.int32)))
        self._control(stream_id, *tensors)

    def _control(self, stream_id: str, *tensors) -> None:
        """A control request naming the LM's stream `stream_id`: its one response is the final flag."""
        control = pb_utils.InferenceRequest(model_name=LM, requested_output_names=[], request_id=stream_id,
                                            inputs=list(tensors))
        responses = control.exec(decoupled=True)
        self._graveyard.hold(responses)
        for _ in responses:
            pass

    def update_taken(self, stream_id: str, frames: int) -> None:
        """Tell the LM that `stream_id`'s client has taken its first `frames` frames (backpressure)."""
        self._control(stream_id, pb_utils.Tensor(TAKEN_FRAMES, np.array([frames], dtype=np.int32)))

    def release_all(self) -> None:
        self._graveyard.release_all()

    def _on_call_error(self, message: str, generation: int) -> Ended:
        if (stopping := bls.stopping(LM, message)) is not None:
            self._lane_health.on_unloaded(LM, stopping, generation)
            return stopping
        if bls.triton_failure(message) is EndReason.LANE_DOWN:
            return self._lane_health.on_dead(LM, message, generation)
        return Ended(EndReason.INTERNAL, f"{LM} failed: {message}")
