"""The router's calls to a cascade's refinement lanes, and each stream's codes as its chunks are refined.

A cascade's LM lane (its semantic model) sends chunks of its first codebook with the stream's
`refine_context`; before a chunk is decoded its other codebooks come from a refinement lane, routed as its decode
is (a first or late chunk urgent, the rest background), over every frame the stream has so far: the refiner
reads its first-codebook row whole and continues the codes it wrote for the earlier frames (`RefineTrack`). Both
lanes run the same refiners and take any chunk alone (its context travels with it), so while one lane is down
its chunks go to the other at once, as the codec lanes do.

Each call is timed as a codec call is: the lane's estimate (per lane and batch size) feeds the routing of the
next chunks, whose background slack must cover their refinement too, and the calls in flight on `refiner_urgent`
count toward the urgent lane's budget.
"""
from __future__ import annotations


import numpy as np
import triton_python_backend_utils as pb_utils

from backend_python.stub_common import bls
from backend_python.stub_common.lane_health import LaneHealth
from backend_python.stub_common.metrics import RouterMetrics
from backend_python.vox_ensemble.in_flight import InFlight, exec_in_flight
from protocol.models import REFINER, REFINER_URGENT
from protocol.reasons import Ended, EndReason
from scheduler import Lane, LatencyEstimator

REFINER_LANES = {Lane.URGENT: REFINER_URGENT, Lane.BACKGROUND: REFINER}
OTHER_LANE = {Lane.URGENT: Lane.BACKGROUND, Lane.BACKGROUND: Lane.URGENT}


class RefinerLanes:
    def __init__(self, estimator: LatencyEstimator, metrics: RouterMetrics, lane_health: LaneHealth) -> None:
        self.estimator = estimator
        self._metrics = metrics
        self._lane_health = lane_health
        self._in_flight = InFlight()

    def batch_size_if_joined(self, lane: Lane) -> int:
        """The batch a refinement sent to `lane` now would join (the routing's estimate keys on it)."""
        return self._in_flight.count(lane) + 1

    def in_flight(self, lane: Lane) -> int:
        """Refinements on `lane` now, queued ones included (the urgent lane's budget counts them)."""
        return self._in_flight.count(lane)

    def refine(self, lane: Lane, semantic: np.ndarray, refined: np.ndarray, context: np.ndarray,
               parameters: dict) -> np.ndarray | Ended:
        """The other codebooks [n - m, K - 1] of frames m..n-1, on `lane` or, while it is down, the other."""
        ended = None
        for serving in (lane, OTHER_LANE[lane]):
            if (down := self._lane_health.unavailable(REFINER_LANES[serving])) is not None:
                ended = ended or down
                continue
            codes = self._call(serving, semantic, refined, context, parameters)
            if not (isinstance(codes, Ended) and codes.reason is EndReason.LANE_DOWN):
                return codes
            ended = ended or codes
        return ended

    def _call(self, lane: Lane, semantic, refined, context, parameters: dict) -> np.ndarray | Ended:
        model = REFINER_LANES[lane]
        request = pb_utils.InferenceRequest(
            model_name=model, requested_output_names=["codes", "batch_size", "run_ms"],
            inputs=[pb_utils.Tensor("semantic", semantic[None].astype(np.int32)),
                    pb_utils.Tensor("refined", refined[None].astype(np.int32)),
                    pb_utils.Tensor("refine_context", context[None].astype(np.int32))],
            parameters=parameters)
        generation = self._lane_health.generation(model)
        response, elapsed = exec_in_flight(request, self._in_flight, lane)
        if response.has_error():
            return self._on_call_error(model, response.error().message(), generation)
        self.estimator.observe(lane, max(1, bls.scalar_output(response, "batch_size")), elapsed)
        self._metrics.on_refiner_call(lane, elapsed, bls.float_output(response, "run_ms") / 1e3)
        codes = pb_utils.get_output_tensor_by_name(response, "codes").as_numpy()
        return np.array(codes[0], dtype=np.int32)  # a copy: the response's memory goes with it

    def _on_call_error(self, model: str, message: str, generation: int) -> Ended:
        if (stopping := bls.stopping(model, message)) is not None:
            return stopping
        if bls.triton_failure(message) is EndReason.LANE_DOWN:
            return self._lane_health.on_dead(model, message, generation)
        return bls.lane_failure(model, message)


class RefineTrack:
    """One stream's frames as its chunks come: the first codebook as the LM sent it, the others as refined."""

    def __init__(self, num_other: int = 3) -> None:
        self.semantic = np.zeros(0, np.int32)
        self.refined = np.zeros((0, num_other), np.int32)

    def needs_refinement(self, arrays: dict) -> bool:
        """Whether the chunk's window reaches frames not refined yet (`window` would call a refinement lane)."""
        return _span(arrays)[1] > self.refined.shape[0]

    def window(self, arrays: dict, lanes: RefinerLanes, lane: Lane, parameters: dict) -> np.ndarray | Ended:
        """The chunk's window (its LM tokens [T, 1]) as whole frames [T, K], refining the frames it is the first
        to reach. A stream spoken in segments (a streamed text, a long one) refines each alone: the refiner reads
        the chunk's segment's codes from its first frame (`segment_start`), with that segment's text."""
        tokens = np.asarray(arrays["tokens"], np.int32)[:, 0]
        start, end = _span(arrays)
        segment = int(arrays["segment_start"][0]) if "segment_start" in arrays else 0
        if start < 0 or start > self.semantic.shape[0] or not 0 <= segment <= self.refined.shape[0]:
            return Ended(EndReason.INTERNAL, f"a refined stream's chunk starts at frame {start} (its segment at "
                                             f"{segment}) with {self.semantic.shape[0]} frames known, "
                                             f"{self.refined.shape[0]} refined")
        self.semantic = np.concatenate((self.semantic[:start], tokens))
        if end > self.refined.shape[0]:
            codes = lanes.refine(lane, self.semantic[segment:end], self.refined[segment:],
                                 np.asarray(arrays["refine_context"]), parameters)
            if isinstance(codes, Ended):
                return codes
            if codes.shape != (end - self.refined.shape[0], self.refined.shape[1]):
                return Ended(EndReason.INTERNAL, f"the refinement lane answered codes of shape {codes.shape} for "
                                                 f"{end - self.refined.shape[0]} frames")
            self.refined = np.concatenate((self.refined, codes))
        return np.concatenate((self.semantic[start:end, None], self.refined[start:end]), axis=1)


def _span(arrays: dict) -> tuple[int, int]:
    """The stream frames [start, end) of a chunk's window: its left context, new frames and lookahead."""
    start = int(arrays["start_frame"][0]) - int(arrays["context_frames"][0])
    return start, start + arrays["tokens"].shape[0]
