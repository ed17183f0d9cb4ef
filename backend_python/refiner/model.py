"""Triton glue of a refinement lane (`refiner` and `refiner_urgent`: same code, two models on their own SM shares).

A cascade's LM lane writes a stream's first codebook; its refinement lane writes the others, chunk by chunk,
before the codec lanes decode it (the family's `load_refiner`, models/registry.py). The router routes a chunk's
refinement by the same deadline rule as its decode: a first chunk (or a late one) on the urgent lane, the rest
on the background lane. Dynamic batching hands `execute` every queued chunk at once; they are refined in one
batch. Inputs per request: `semantic` INT32 [1, n] (the stream's first-codebook codes so far, up to the chunk's
last frame), `refined` INT32 [1, m, K-1] (the other codebooks of its first m frames, kept as they are: the
refiner continues them), `refine_context` INT32 [1, c] (what the LM lane sent with the chunk: the family's
layout). Outputs: `codes` INT32 [1, n - m, K-1], `batch_size` INT32 [1, 1], `run_ms` FP32 [1, 1] (as the codec
lanes'). A malformed request, or one whose refinement raises, is answered with its own error; the others still
refine. A server whose model is not a cascade loads the lane without weights and refuses every request.
"""
from __future__ import annotations

import logging
import time

import numpy as np
import triton_python_backend_utils as pb_utils

from backend_python.stub_common import fault_inject, unloads
from backend_python.stub_common.heap import HeapTrimmer, bound_onednn_cache
from backend_python.stub_common.params import set_up_lane
from backend_python.stub_common.responses import error_response
from protocol.reasons import Ended, EndReason

log = logging.getLogger("voxlane.refiner")


class RefinerModel:
    def initialize(self, args: dict) -> None:
        bound_onednn_cache()
        setup = set_up_lane(args)
        from backend_python.models import registry
        self.model_name = setup.spec.name
        self.refiner = registry.load_refiner(setup.spec, device=setup.device, dtype=setup.lane.dtype)
        self._fault_marker = fault_inject.marker_from_env()
        self._heap = HeapTrimmer()
        self._heap.start()

    def execute(self, requests: list) -> list:
        if self.refiner is None:
            message = f"{self.model_name} has no refinement stage: its chunks go to the codec lanes as they are"
            return [error_response(Ended(EndReason.REFUSED_BAD_INPUT, message)) for _ in requests]
        parsed, errors = [], []
        for request in requests:
            if fault_inject.is_tagged(self._fault_marker, request.parameters()):
                parsed.append(None)
                errors.append(Ended(EndReason.INTERNAL, "injected refiner fault (VOXLANE_FAULT_INJECT)"))
                continue
            try:
                parsed.append(self._request(request))
                errors.append(None)
            except ValueError as exc:  # the request itself is wrong
                parsed.append(None)
                errors.append(Ended(EndReason.REFUSED_BAD_INPUT, str(exc)))
        valid = [i for i, r in enumerate(parsed) if r is not None]
        started = time.perf_counter()
        refined = dict(zip(valid, self._refine_isolated([parsed[i] for i in valid])))
        run_ms = (time.perf_counter() - started) * 1e3
        responses = []
        for i, error in enumerate(errors):
            codes = refined.get(i)
            error = error or (Ended(EndReason.INTERNAL, codes) if isinstance(codes, str) else None)
            responses.append(self._response(error, codes, len(requests), run_ms))
        self._heap.on_batch()
        return responses

    def finalize(self) -> None:
        unloads.mark_unloaded()
        self._heap.stop()

    def _request(self, request):
        arrays = {name: _input(request, name) for name in ("semantic", "refined", "refine_context")}
        missing = [name for name in ("semantic", "refine_context") if arrays[name] is None]
        if missing:
            raise ValueError(f"a refinement request needs {missing}")
        refined = arrays["refined"] if arrays["refined"] is not None else np.zeros((0, 3), np.int32)
        built = self.refiner.request(arrays["semantic"], refined, arrays["refine_context"])
        self.refiner.check(built)
        return built

    def _refine_isolated(self, requests: list) -> list:
        """Codes per request, or an error string for each whose refinement raises (a batch that fails is
        refined one request at a time)."""
        if not requests:
            return []
        try:
            return self.refiner.refine(requests)
        except Exception as exc:
            if len(requests) == 1:
                log.error("refinement failed: %s", exc)
                return [f"refinement failed: {exc}"]
        return [self._refine_isolated([r])[0] for r in requests]

    @staticmethod
    def _response(error: Ended | None, codes, batch_size: int, run_ms: float):
        if error is not None:
            return error_response(error)
        return pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("codes", np.ascontiguousarray(codes, dtype=np.int32)[None]),
            pb_utils.Tensor("batch_size", np.array([[batch_size]], dtype=np.int32)),
            pb_utils.Tensor("run_ms", np.array([[run_ms]], dtype=np.float32)),
        ])


def _input(request, name: str):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy()[0]
