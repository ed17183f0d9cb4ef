"""Triton glue of a codec lane (`codec` and `codec_urgent`: same code, two models).

Dynamic batching hands `execute` every queued chunk at once; they decode in
one call. Inputs per request: `codes` INT32 [1, frames, K] (left context first),
`context_frames` INT32 [1, 1], and optionally the chunk's place in its stream:
`stream_id` BYTES [1, 1], `start_frame` INT32 [1, 1], `is_last` BOOL [1, 1], and for a codec with
lookahead or a condition: `lookahead_frames` INT32 [1, 1] (frames after the new ones, last in `codes`) and
`condition` FP32 [1, condition_dim] (the stream's speaker embedding). A lane
with `stream_states` (the background lane) keeps each stream's decoder state and
decodes only a chunk's new frames when the chunk continues where its stream's
state stands; any other chunk takes the windowed path and leaves a state
(engine/codec_runner.py). Outputs: `audio` FP32
[1, (new_frames + min(overlap_frames, lookahead_frames)) * samples_per_frame], `sample_rate` INT32 [1, 1], `batch_size`
INT32 [1, 1] (how many chunks shared the call: the router's latency estimate
keys on it), `run_ms` FP32 [1, 1] (the wall time of this `execute`'s decode, the same for every chunk
of the batch: the router splits its call time into queueing and run with it). A malformed request is answered with its own error; the others
in the batch still decode. So is a request whose decode raises: when a batched
decode fails, each window is decoded alone and only the failing ones get an error.
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

log = logging.getLogger("voxlane.codec")


class CodecModel:
    def initialize(self, args: dict) -> None:
        bound_onednn_cache()
        setup = set_up_lane(args)
        from backend_python.models import registry
        self.device = setup.device
        from backend_python.engine.codec_runner import CodecRunner, StreamChunk, decode_windowed
        self._chunk = StreamChunk  # imported here: torch only after the lane's MPS limit is set
        self._decode_windowed = decode_windowed
        self.codec = registry.load_codec(setup.spec, device=setup.device, dtype=setup.lane.dtype,
                                         steps=setup.lane.codec_steps)
        self.codec.use_torch_compile = setup.lane.codec_compile  # read at warm-up (Codec.capture_graphs)
        from backend_python.engine.codec_states import CodecStateLimits
        self.runner = CodecRunner(self.codec, use_cuda_graphs=setup.lane.cuda_graphs,
                                  stream_states=CodecStateLimits() if setup.lane.stream_states else None)
        self.runner.warm_up()
        self._fault_marker = fault_inject.marker_from_env()  # None unless a test turned the hook on
        self._heap = HeapTrimmer()  # a batch of a new shape leaves its peak in the heap: give it back
        self._heap.start()

    def execute(self, requests: list) -> list:
        windows, errors, faulty = [], [], []
        for request in requests:
            try:
                windows.append(self._window(request))
                errors.append(None)
            except ValueError as exc:  # the request itself is wrong
                windows.append(None)
                errors.append(Ended(EndReason.REFUSED_BAD_INPUT, str(exc)))
            faulty.append(fault_inject.is_tagged(self._fault_marker, request.parameters()))
        valid = [i for i, w in enumerate(windows) if w is not None]
        started = time.perf_counter()
        decoded = dict(zip(valid, self._decode_isolated([windows[i] for i in valid], [faulty[i] for i in valid])))
        run_ms = (time.perf_counter() - started) * 1e3
        for i, audio in decoded.items():
            if isinstance(audio, str):
                errors[i] = Ended(EndReason.INTERNAL, audio)
        responses = [self._response(err, decoded.get(i) if err is None else None, len(windows), run_ms)
                     for i, err in enumerate(errors)]
        self._heap.on_batch()
        return responses

    def finalize(self) -> None:
        unloads.mark_unloaded()  # an unload, not a death, for the router's watch of this lane
        self._heap.stop()

    def _decode_isolated(self, windows: list, faulty: list[bool]) -> list:
        """Audio per window, or an error string for each window whose decode raises."""
        try:
            if any(faulty):
                raise fault_inject.InjectedFault("injected codec fault (VOXLANE_FAULT_INJECT)")
            return self._decode(windows)
        except Exception as exc:  # one bad window must not fail the whole batch: decode each alone
            if len(windows) == 1:
                log.error("codec decode failed: %s", exc)
                return [f"codec decode failed: {exc}"]
        return [self._decode_isolated([w], [f])[0] for w, f in zip(windows, faulty)]

    def _window(self, request):
        import torch
        codes = pb_utils.get_input_tensor_by_name(request, "codes").as_numpy()
        context = int(pb_utils.get_input_tensor_by_name(request, "context_frames").as_numpy().reshape(-1)[0])
        if codes.ndim != 3 or codes.shape[0] != 1 or codes.shape[2] != self.codec.num_codebooks:
            raise ValueError(f"codes must be [1, frames, {self.codec.num_codebooks}], got {list(codes.shape)}")
        lookahead = _optional(request, "lookahead_frames")
        lookahead = 0 if lookahead is None else int(lookahead)
        if context < 0 or lookahead < 0 or context + lookahead >= codes.shape[1]:
            raise ValueError(f"context_frames {context} and lookahead_frames {lookahead} leave no new frame in a "
                             f"{codes.shape[1]}-frame window")
        if codes.min() < 0 or codes.max() >= self.codec.codebook_size:
            raise ValueError(f"codes must be in [0, {self.codec.codebook_size})")
        tokens = torch.from_numpy(codes[0].astype(np.int64)).to(self.device)
        condition = self._condition(request)
        stream_id = _optional(request, "stream_id")
        start = _optional(request, "start_frame")
        is_last = _optional(request, "is_last")
        # without `start_frame` (a client that names no place) the window's first new frame counts as frame
        # `context`: the window starts the stream
        return self._chunk("" if stream_id is None else stream_id.decode("utf-8"), tokens, context,
                           context if start is None else int(start), bool(is_last) if is_last is not None else False,
                           lookahead, condition)

    def _condition(self, request):
        """The request's `condition` [condition_dim] on the lane's device, or None (the codec's default)."""
        tensor = pb_utils.get_input_tensor_by_name(request, "condition")
        if tensor is None:
            return None
        import torch
        values = tensor.as_numpy().reshape(-1)
        if self.codec.condition_dim == 0:
            raise ValueError(f"condition given, but the {type(self.codec).__name__} codec takes none")
        if values.shape[0] != self.codec.condition_dim or not np.isfinite(values).all():
            raise ValueError(f"condition must be {self.codec.condition_dim} finite values, got {values.shape[0]}")
        return torch.from_numpy(values.astype(np.float32)).to(self.device)

    def _decode(self, chunks: list) -> list[np.ndarray]:
        """StreamChunks; one without a stream id (the router named none) decodes as a plain window."""
        if not chunks:
            return []
        if self.runner.states is None or any(not c.stream_id for c in chunks):
            audio = self._decode_windowed(self.runner, chunks)
        else:
            audio = self.runner.decode_chunks(chunks)
        return [a.float().cpu().numpy() for a in audio]

    def _response(self, error: Ended | None, audio: np.ndarray | None, batch_size: int, run_ms: float):
        if error is not None:
            return error_response(error)
        return pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("audio", audio.reshape(1, -1).astype(np.float32)),
            pb_utils.Tensor("sample_rate", np.array([[self.codec.sample_rate]], dtype=np.int32)),
            pb_utils.Tensor("batch_size", np.array([[batch_size]], dtype=np.int32)),
            pb_utils.Tensor("run_ms", np.array([[run_ms]], dtype=np.float32)),
        ])


def _optional(request, name: str):
    """The scalar of an optional [1, 1] input, or None when the request left it out."""
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy().reshape(-1)[0]
