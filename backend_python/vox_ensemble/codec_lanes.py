"""The router's calls to the codec lanes: decode one window, the chunks in flight per lane, lane
health, and the latency estimates those calls feed.

Both lanes run the same codec and decode any window alone (its left context travels with it), so
while one lane is down its chunks go to the other at once, the chunk that met the crash too: a
stream loses no audio unless both lanes are down. A chunk sent to the lane it was not routed to
decodes without its stream place (the windowed path); a background lane that comes back starts a
stream's state afresh at that stream's next chunk.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import triton_python_backend_utils as pb_utils

from backend_python.stub_common import bls
from backend_python.stub_common.lane_health import LaneHealth
from backend_python.stub_common.metrics import RouterMetrics
from backend_python.vox_ensemble.in_flight import InFlight, exec_in_flight
from protocol.models import CODEC, CODEC_URGENT
from protocol.reasons import Ended, EndReason
from scheduler import Lane, LatencyEstimator

LANE_MODELS = {Lane.URGENT: CODEC_URGENT, Lane.BACKGROUND: CODEC}
OTHER_LANE = {Lane.URGENT: Lane.BACKGROUND, Lane.BACKGROUND: Lane.URGENT}


@dataclass(frozen=True)
class StreamPlace:
    """A chunk's place in its stream: a lane that keeps stream states decodes only its new frames."""

    stream_id: str
    start_frame: int  # the stream's index of the chunk's first new frame
    is_last: bool

    def tensors(self, with_stream: bool = True) -> list:
        """The place's inputs; without the stream (a lane that keeps no state for it) only `start_frame`, which
        a codec that lays out its windows by stream position needs on every lane."""
        start = pb_utils.Tensor("start_frame", np.array([[self.start_frame]], dtype=np.int32))
        if not with_stream:
            return [start]
        return [pb_utils.Tensor("stream_id", np.array([[self.stream_id.encode()]], dtype=np.object_)), start,
                pb_utils.Tensor("is_last", np.array([[self.is_last]], dtype=np.bool_))]


class CodecLanes:
    def __init__(self, estimator: LatencyEstimator, metrics: RouterMetrics, lane_health: LaneHealth) -> None:
        self.estimator = estimator
        self._metrics = metrics
        self._lane_health = lane_health
        self._in_flight = InFlight()

    def batch_size_if_joined(self, lane: Lane) -> int:
        """The batch a chunk sent to `lane` now would join (the routing's latency estimate keys on it)."""
        return self._in_flight.count(lane) + 1

    def in_flight(self, lane: Lane) -> int:
        """Chunks being decoded on `lane` now, queued ones included (the urgent lane's budget counts them)."""
        return self._in_flight.count(lane)

    def decode(self, lane: Lane, tokens: np.ndarray, context: int, parameters: dict,
               place: StreamPlace | None = None, lookahead: int = 0, condition: np.ndarray | None = None):
        """Decode one window (`tokens`: [frames, K] int32, the first `context` frames left context, the last
        `lookahead` frames right context) on `lane`, or on the other lane while `lane` is down: (audio [n]
        float32, sample_rate), or the Ended of a stream that cannot go on. `place` names the chunk's stream
        for the background lane, which keeps stream states; `condition` is the stream's codec condition."""
        ended = None
        extra = self._window_tensors(lookahead, condition)
        for serving in (lane, OTHER_LANE[lane]):
            if (down := self._lane_health.unavailable(LANE_MODELS[serving])) is not None:
                ended = ended or down
                continue
            decoded = self._call(serving, tokens, context, parameters, place, extra, with_stream=serving is lane)
            if not (isinstance(decoded, Ended) and decoded.reason is EndReason.LANE_DOWN):
                return decoded
            ended = ended or decoded  # the lane died under this call: the other lane takes the chunk
        return ended

    @staticmethod
    def _window_tensors(lookahead: int, condition: np.ndarray | None) -> list:
        """The optional inputs of a codec with lookahead or a condition (none for the others)."""
        tensors = [pb_utils.Tensor("lookahead_frames", np.array([[lookahead]], dtype=np.int32))] if lookahead else []
        if condition is not None:
            tensors.append(pb_utils.Tensor("condition", condition.reshape(1, -1).astype(np.float32)))
        return tensors

    def _call(self, lane: Lane, tokens: np.ndarray, context: int, parameters: dict, place: StreamPlace | None,
              extra: list | None = None, with_stream: bool = True):
        """One codec call; the background lane, where the chunk was routed (`with_stream`), gets the chunk's whole
        place and keeps the stream's state; any other call gets only its start frame (the windowed path)."""
        model = LANE_MODELS[lane]
        place_tensors = [] if place is None else place.tensors(with_stream and lane is Lane.BACKGROUND)
        request = pb_utils.InferenceRequest(
            model_name=model, requested_output_names=["audio", "sample_rate", "batch_size", "run_ms"],
            inputs=[pb_utils.Tensor("codes", tokens[None].astype(np.int32)),
                    pb_utils.Tensor("context_frames", np.array([[context]], dtype=np.int32)),
                    *place_tensors, *(extra or [])],
            parameters=parameters)
        generation = self._lane_health.generation(model)
        response, elapsed = exec_in_flight(request, self._in_flight, lane)
        if response.has_error():
            return self._on_call_error(model, response.error().message(), generation)
        self.estimator.observe(lane, max(1, bls.scalar_output(response, "batch_size")), elapsed)
        self._metrics.on_codec_call(lane, elapsed, bls.float_output(response, "run_ms") / 1e3)
        audio = pb_utils.get_output_tensor_by_name(response, "audio").as_numpy().reshape(-1)
        # a copy: as_numpy() views the response's shared memory, freed with the response (a view
        # sent later crashed the stub)
        return np.array(audio, dtype=np.float32), bls.scalar_output(response, "sample_rate")

    def _on_call_error(self, model: str, message: str, generation: int) -> Ended:
        if (stopping := bls.stopping(model, message)) is not None:
            return stopping
        if bls.triton_failure(message) is EndReason.LANE_DOWN:
            return self._lane_health.on_dead(model, message, generation)
        return bls.lane_failure(model, message)
