"""Triton glue of `vox_ensemble`: the decoupled BLS router.

Per request: validate (a bad request fails here, before any model work), then
one worker thread starts the request on `speechlm_lm` (a BLS request whose one
response says accepted or refused), reads its chunks from the router's chunk
channel (chunk_channel.py says why not from a decoupled BLS stream), routes each
chunk to a codec lane by its playback deadline, and sends the audio back in
order. Codec calls block, so each request gets its own thread; `execute`
returns None at once.
"""
from __future__ import annotations

import gc
import logging
import threading
import time
import uuid
from dataclasses import dataclass

import numpy as np
import triton_python_backend_utils as pb_utils

from backend_python.engine.reasons import CANCELLED
from backend_python.triton import fault_inject
from backend_python.triton.cancel_watch import CancelWatch
from backend_python.triton.chunk_channel import CHUNK, ChunkChannel
from backend_python.triton.graveyard import Graveyard
from backend_python.triton.lane_health import LaneHealth
from backend_python.triton.live_streams import LiveStreams
from backend_python.triton.lm_watch import LMWatch
from backend_python.triton.metrics import RouterMetrics
from backend_python.triton.params import model_parameters
from backend_python.triton.request_inputs import (INPUT_NAMES, RequestError, RequestLimits, SpeechRequest,
                                                  check_request_parameters, parse_speech_request)
from backend_python.triton.stub_process import StubWatch
from scheduler import ChunkRouter, Lane, LatencyEstimator, PlaybackClock, SchedulerConfig

log = logging.getLogger("voxlane.router")
FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
LANE_MODELS = {Lane.URGENT: "codec_urgent", Lane.BACKGROUND: "codec"}
LM_MODEL = "speechlm_lm"


class _InFlight:
    """Chunks in flight per lane: the batch a new chunk would join."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = {lane: 0 for lane in Lane}

    def enter(self, lane: Lane) -> None:
        with self._lock:
            self._counts[lane] += 1

    def leave(self, lane: Lane) -> None:
        with self._lock:
            self._counts[lane] -= 1

    def peek(self, lane: Lane) -> int:
        with self._lock:
            return self._counts[lane] + 1


@dataclass(frozen=True)
class _Job:
    """One admitted request as its worker thread sees it (copies, never the request object)."""

    stream_id: str  # the LM request's id: the cancel control request names it
    inputs: list  # the client's tensors, copied
    sender: object  # the request's response sender
    arrival: float  # time.monotonic() when execute saw it
    codec_parameters: dict  # BLS parameters of its codec calls (the test-only fault tag, or empty)


@dataclass(frozen=True)
class _Chunk:
    """A decoded chunk, ready to send."""

    index: int
    lane: Lane
    audio: np.ndarray  # [n] float32
    sample_rate: int

    @property
    def duration_s(self) -> float:
        return self.audio.size / self.sample_rate

    def tensors(self) -> list:
        return [pb_utils.Tensor("audio", self.audio),
                pb_utils.Tensor("sample_rate", np.array([self.sample_rate], dtype=np.int32)),
                pb_utils.Tensor("chunk_index", np.array([self.index], dtype=np.int32)),
                pb_utils.Tensor("lane", np.array([self.lane.value.encode()], dtype=np.bytes_))]


class RouterModel:
    def initialize(self, args: dict) -> None:
        params = model_parameters(args)
        self.config = SchedulerConfig.from_dict(params, ignore_unknown=True)
        self.limits = RequestLimits.from_parameters(params)
        self.estimator = LatencyEstimator.from_config(self.config)
        self.router = ChunkRouter(self.config, self.estimator)
        self.in_flight = _InFlight()
        self._graveyard = Graveyard()
        self.metrics = RouterMetrics()
        self.lane_health = LaneHealth(pb_utils.unload_model, pb_utils.is_model_ready)
        self._fault_marker = fault_inject.marker_from_env()  # None unless a test turned the hook on
        self.channel = ChunkChannel()
        self.cancel_watch = CancelWatch(self._cancel_lm)
        self.cancel_watch.start()
        self.streams = LiveStreams(self._finish)
        self.lm_watch = LMWatch(StubWatch(LM_MODEL).probe, self._on_lm_dead,
                                has_streams=lambda: len(self.streams) > 0,
                                is_lm_available=lambda: self.lane_health.unavailable(LM_MODEL) is None)
        self.lm_watch.start()

    def execute(self, requests: list) -> None:
        for request in requests:
            sender = request.get_response_sender()
            try:
                job = self._admit(request, sender)
            except RequestError as exc:
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc))), flags=FINAL)
                continue
            threading.Thread(target=self._stream, args=(job,), daemon=True, name="voxlane-stream").start()
        return None

    def finalize(self) -> None:
        """Free the held BLS iterators here: left to the stub's own teardown, they kept this model
        from unloading and tritonserver waited out its exit timeout on SIGTERM."""
        self.lm_watch.stop()
        self.cancel_watch.stop()
        self.channel.close()
        self._graveyard.release_all()
        gc.collect()  # iterators kept alive by reference cycles (e.g. a stored traceback) go too

    def _admit(self, request, sender) -> _Job:
        """Validate a request (raises RequestError) and copy what its worker thread needs."""
        check_request_parameters(request.parameters())
        if (down := self.lane_health.unavailable(LM_MODEL)) is not None:
            raise RequestError(down)
        req: SpeechRequest = parse_speech_request(lambda name: _as_numpy(request, name), self.limits)
        return _Job(stream_id=uuid.uuid4().hex, inputs=_copied_inputs(request), sender=sender,
                    arrival=time.monotonic(),
                    codec_parameters=fault_inject.codec_parameters(self._fault_marker, req.text))

    def _stream(self, job: _Job) -> None:
        clock = PlaybackClock()
        self.metrics.add_live(1)
        self.cancel_watch.add(job.stream_id, job.sender.is_cancelled)
        self.streams.add(job.stream_id, job)
        try:
            error = self._relay(job, clock, lambda chunk: self._send(job, chunk, clock))
        except Exception as exc:  # one broken stream ends with an error, never the server
            log.exception("stream failed")
            error = f"internal error: {exc}"
        self.streams.end(job.stream_id, error)  # a no-op when the LM watch ended it first

    def _finish(self, job: _Job, error: str | None) -> None:
        """A stream's final response (LiveStreams calls it once per stream)."""
        self.cancel_watch.remove(job.stream_id)  # before the final response: see CancelWatch
        self.metrics.add_live(-1)
        if error is None:
            job.sender.send(flags=FINAL)
        else:
            job.sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(error)), flags=FINAL)

    def _send(self, job: _Job, chunk: "_Chunk", clock: PlaybackClock) -> bool:
        """Send one chunk; False when the stream was ended meanwhile (by the LM watch)."""
        response = pb_utils.InferenceResponse(output_tensors=chunk.tensors())
        if not self.streams.send(job.stream_id, lambda: job.sender.send(response)):
            return False
        now = time.monotonic()
        deadline = clock.deadline(chunk.index) if chunk.index > 0 else None
        self.metrics.on_chunk(chunk.lane, is_stall=deadline is not None and now > deadline)
        if chunk.index == 0:
            self.metrics.on_first_chunk(now - job.arrival)
        clock.on_sent(chunk.index, chunk.duration_s, now)
        return True

    def _relay(self, job: _Job, clock: PlaybackClock, send) -> str | None:
        """Stream LM chunks through the codec lanes; returns an error or None when done."""
        messages = self.channel.subscribe(job.stream_id)  # before the LM can send anything
        try:
            if (refused := self._start_lm(job)) is not None:
                return refused
            while True:
                kind, payload = messages.get()  # the LM's death wakes it too: see _on_lm_dead
                if kind != CHUNK:  # the LM ended the stream: done (None), cancelled, or failed
                    return "cancelled by the client" if payload == CANCELLED else payload
                if job.sender.is_cancelled():  # the client is gone: stop the LM stream, decode nothing more
                    self._cancel_lm(job.stream_id)
                    return "cancelled by the client"
                chunk = self._relay_chunk(payload, clock, job.codec_parameters)
                if isinstance(chunk, str):  # this stream cannot go on: free its LM slot too
                    self._cancel_lm(job.stream_id)
                    return chunk
                if not send(chunk):  # ended from outside (the LM died): nothing more to send
                    return None
        finally:
            self.channel.unsubscribe(job.stream_id)

    def _start_lm(self, job: _Job) -> str | None:
        """Hand the request to the LM; its one response is the final flag, with `error` if refused."""
        lm_request = pb_utils.InferenceRequest(
            model_name=LM_MODEL, requested_output_names=["error"], inputs=job.inputs,
            request_id=job.stream_id, parameters=self.channel.parameters)
        responses = lm_request.exec(decoupled=True)
        self._graveyard.hold(responses)
        for response in responses:
            if response.has_error():  # from Triton itself: the LM could not be reached
                return response.error().message()
            if (error := _lm_error(response)) is not None:  # the LM refused the request
                return error
        return None

    def _cancel_lm(self, stream_id: str) -> None:
        """End the LM's stream `stream_id` (its client went away); its slot frees at the LM's next step.

        Triton 2.51 cannot cancel a BLS request, so the LM gets a control request
        (`cancel` = true, the stream's request id). Unknown ids are ignored there.
        """
        control = pb_utils.InferenceRequest(
            model_name=LM_MODEL, requested_output_names=[], request_id=stream_id,
            inputs=[pb_utils.Tensor("cancel", np.array([True], dtype=np.bool_))])
        responses = control.exec(decoupled=True)
        self._graveyard.hold(responses)
        for _ in responses:
            pass

    def _on_lm_dead(self, message: str) -> None:
        """The LM's process died: take the lane out of service and end every stream waiting on it."""
        self.lane_health.on_error(LM_MODEL, message)
        reason = self.lane_health.unavailable(LM_MODEL) or f"the {LM_MODEL} lane is down (its process died)"
        ended = self.streams.end_all(reason)
        self.channel.end_all(reason)  # wakes their worker threads
        log.error("the LM's process died; ended %d live streams", ended)

    def _relay_chunk(self, arrays: dict, clock: PlaybackClock, codec_parameters: dict):
        """Route and decode one LM chunk (its arrays by output name); returns a _Chunk or an error string."""
        tokens = arrays["tokens"]  # [frames, K] int32
        context = arrays["context_frames"]
        index = int(arrays["chunk_index"][0])
        lane = self.router.route(clock, index, time.monotonic(), self.in_flight.peek(Lane.BACKGROUND)).lane
        decoded = (_inline_audio(arrays) if lane is Lane.INLINE
                   else self._decode(lane, tokens, int(context[0]), codec_parameters))
        if isinstance(decoded, str):
            return decoded
        chunk = _Chunk(index, lane, *decoded)
        clock.on_emitted(index, chunk.duration_s)
        return chunk

    def _decode(self, lane: Lane, tokens: np.ndarray, context: int, parameters: dict):
        """Decode one window on `lane`; returns (audio [n] float32, sample_rate) or an error string."""
        model = LANE_MODELS[lane]
        if (unavailable := self.lane_health.unavailable(model)) is not None:
            return unavailable
        request = pb_utils.InferenceRequest(
            model_name=model, requested_output_names=["audio", "sample_rate", "batch_size"],
            inputs=[pb_utils.Tensor("codes", tokens[None].astype(np.int32)),
                    pb_utils.Tensor("context_frames", np.array([[context]], dtype=np.int32))],
            parameters=parameters)
        self.in_flight.enter(lane)
        started = time.monotonic()
        try:
            response = request.exec()
        finally:
            self.in_flight.leave(lane)
        if response.has_error():
            return self.lane_health.on_error(model, response.error().message())
        batch_size = int(pb_utils.get_output_tensor_by_name(response, "batch_size").as_numpy().reshape(-1)[0])
        elapsed = time.monotonic() - started
        self.estimator.observe(lane, max(1, batch_size), elapsed)
        self.metrics.on_codec_call(lane, elapsed)
        audio = pb_utils.get_output_tensor_by_name(response, "audio").as_numpy().reshape(-1)
        sample_rate = int(pb_utils.get_output_tensor_by_name(response, "sample_rate").as_numpy().reshape(-1)[0])
        # a copy: as_numpy() views the response's shared memory, freed with the response (a view
        # sent later crashed the stub)
        return np.array(audio, dtype=np.float32), sample_rate


def _lm_error(response) -> str | None:
    error = pb_utils.get_output_tensor_by_name(response, "error")
    return None if error is None else error.as_numpy().reshape(-1)[0].decode("utf-8")


def _inline_audio(arrays: dict):
    """(audio, sample_rate) that the LM decoded itself (timeshare), or an error string."""
    if "audio" not in arrays:
        return "the LM lane sent no inline audio: is speechlm_lm in timeshare mode too?"
    return arrays["audio"].reshape(-1), int(arrays["sample_rate"].reshape(-1)[0])


def _copied_inputs(request) -> list:
    """The client's inputs as new tensors for the LM request (not the request's own tensors)."""
    return [pb_utils.Tensor(name, array.copy()) for name in INPUT_NAMES
            if (array := _as_numpy(request, name)) is not None]


def _as_numpy(request, name: str):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy()
