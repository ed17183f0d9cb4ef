"""Triton glue of `vox_ensemble`: the decoupled BLS router.

Per request: validate (a bad request fails here, before any model work), then one worker thread
runs the stream's relay (relay.py: start it on the LM, then route, decode and send each chunk in
order) and sends the final response with the `Ended` it returns. Codec calls block, so each
request gets its own thread; `execute` returns None at once. What goes back to the client passes
through the outlet (outlet.py). Around the streams: a cancel watch (cancel_watch.py), an LM watch
(lm_watch.py) and the lanes' health (lane_health.py).
"""
from __future__ import annotations

import gc
import logging
import threading
import time
import uuid

import numpy as np
import triton_python_backend_utils as pb_utils

from backend_python.router.acks import ACK, AckRoutes, parse_ack
from backend_python.router.cancel_watch import CancelWatch
from backend_python.router.codec_lanes import CodecLanes
from backend_python.router.lane_health import HealPolicy, LaneHealth, ModelControl
from backend_python.router.lm_client import LMClient
from backend_python.router.lm_watch import LMWatch
from backend_python.router.outlet import FINAL, Outlet, error_response
from backend_python.router.relay import Relay
from backend_python.router.stream import Job, as_numpy, copied_inputs
from backend_python.router.stub_process import StubWatch, stub_is_running
from backend_python.triton import fault_inject
from backend_python.triton.chunk_channel import ChunkChannel
from backend_python.triton.metrics import RouterMetrics
from backend_python.triton.params import model_parameters
from backend_python.audio.stream import StreamAudio
from backend_python.triton.request_inputs import (RequestError, RequestLimits, SpeechRequest,
                                                  check_request_parameters, parse_audio_options,
                                                  parse_speech_request)
from protocol.models import LM
from protocol.reasons import Ended, EndReason
from protocol.tensors import MAX_UNREAD_AUDIO_S
from scheduler import ChunkRouter, FlowConfig, LatencyEstimator, PlaybackClock, SchedulerConfig

log = logging.getLogger("voxlane.router")


class RouterModel:
    def initialize(self, args: dict) -> None:
        params = model_parameters(args)
        self.config = SchedulerConfig.from_dict(params, ignore_unknown=True)
        self.limits = RequestLimits.from_parameters(params)
        self.metrics = RouterMetrics()
        control = ModelControl(pb_utils.unload_model, pb_utils.load_model, pb_utils.is_model_ready, stub_is_running)
        self.lane_health = LaneHealth(control, HealPolicy.from_parameters(params), self.metrics.on_lane_change)
        self._fault_marker = fault_inject.marker_from_env()  # None unless a test turned the hook on
        self.channel = ChunkChannel()
        self.lm = LMClient(self.channel.parameters, self.lane_health)
        self.codecs = CodecLanes(LatencyEstimator.from_config(self.config), self.metrics, self.lane_health)
        self.flow = FlowConfig.from_parameters(params)
        self.ack_routes = AckRoutes()
        self.relay = Relay(self.channel, self.lm, ChunkRouter(self.config, self.codecs.estimator), self.codecs,
                           self.flow)
        self.cancel_watch = CancelWatch(self.lm.cancel)
        self.cancel_watch.start()
        self.outlet = Outlet(self.metrics, self.cancel_watch)
        self.lm_watch = LMWatch(StubWatch(LM).is_dead, self._on_lm_dead,
                                has_streams=lambda: self.outlet.num_live > 0,
                                is_lm_available=lambda: self.lane_health.unavailable(LM) is None)
        self.lm_watch.start()

    def execute(self, requests: list) -> None:
        for request in requests:
            sender = request.get_response_sender()
            if self._take_ack(request, sender):
                continue
            job = self._admit(request, sender)
            if isinstance(job, Ended):
                sender.send(error_response(job), flags=FINAL)
                continue
            threading.Thread(target=self._stream, args=(job,), daemon=True, name="voxlane-stream").start()
        return None

    def _take_ack(self, request, sender) -> bool:
        """Pass an ack on to its stream's relay; False when the request is not an ack."""
        try:
            index = parse_ack(lambda name: as_numpy(request, name), has_other_inputs=len(request.inputs()) > 1)
        except RequestError as exc:
            sender.send(error_response(exc.ended), flags=FINAL)
            return True
        if index is None:
            return False
        stream_id = self.ack_routes.stream_of(request.request_id())
        if stream_id is not None:  # else its stream has ended: a late ack means nothing now
            self.channel.post(stream_id, ACK, index)
        sender.send(flags=FINAL)
        return True

    def finalize(self) -> None:
        """Free the held BLS iterators here: left to the stub's own teardown, they kept this model
        from unloading and tritonserver waited out its exit timeout on SIGTERM."""
        self.lane_health.stop()
        self.lm_watch.stop()
        self.cancel_watch.stop()
        self.channel.close()
        self.lm.release_all()
        gc.collect()  # iterators kept alive by reference cycles (e.g. a stored traceback) go too

    def _admit(self, request, sender) -> Job | Ended:
        """Validate a request and copy what its worker thread needs; a refusal is an Ended value."""
        try:
            check_request_parameters(request.parameters())
            if (down := self.lane_health.unavailable(LM)) is not None:
                return down
            req: SpeechRequest = parse_speech_request(lambda name: as_numpy(request, name), self.limits)
            options = parse_audio_options(lambda name: as_numpy(request, name))
            stream_id = uuid.uuid4().hex
            client_id = request.request_id() if req.client_acks else None
            if client_id is not None:
                self.ack_routes.register(client_id, stream_id)
        except RequestError as exc:
            return exc.ended
        return Job(stream_id=stream_id, inputs=copied_inputs(request) + self._flow_inputs(), sender=sender,
                   arrival=time.monotonic(), codec_parameters=fault_inject.codec_parameters(self._fault_marker, req.text),
                   audio=StreamAudio(options.audio_format, options.sample_rate), client_id=client_id)

    def _flow_inputs(self) -> list:
        """The LM's backpressure bound for a stream (none when the server turned it off)."""
        bound = self.flow.max_unread_audio_s
        return [pb_utils.Tensor(MAX_UNREAD_AUDIO_S, np.array([bound], dtype=np.float32))] if bound > 0 else []

    def _stream(self, job: Job) -> None:
        clock = PlaybackClock()
        self.outlet.open(job)
        try:
            ended = self.relay.run(job, clock, lambda chunk: self.outlet.send(job, chunk, clock),
                                   lambda: self.outlet.is_cancelled(job))
        except Exception as exc:  # one broken stream ends with an error, never the server
            log.exception("stream failed")
            ended = Ended(EndReason.INTERNAL, f"internal error: {exc}")
        finally:
            if job.client_id is not None:
                self.ack_routes.unregister(job.client_id)
        self.outlet.end(job, ended)

    def _on_lm_dead(self) -> None:
        """The LM's process died: take the lane out of service and end every stream waiting on it."""
        self.lane_health.on_dead(LM, "its stub process exited")
        ended = self.lane_health.unavailable(LM) or Ended(EndReason.LANE_DOWN, f"the {LM} lane is down")
        num_ended = self.outlet.end_all(ended)
        self.channel.end_all(ended)  # wakes their worker threads
        log.error("the LM's process died; ended %d live streams", num_ended)
