"""Triton glue of `vox_ensemble`: the decoupled BLS router.

Per request: validate (a bad request fails here, before any model work), then one worker thread
runs the stream's relay (relay.py: start it on the LM, then route, decode and send each chunk in
order) and sends the final response with the `Ended` it returns. Codec calls block, so each
request gets its own thread; `execute` returns None at once. What goes back to the client passes
through the outlet (outlet.py). Around the streams: a cancel watch (cancel_watch.py), an LM watch
(lane_watch.py) and the lanes' health (lane_health.py). Each stream's start and end are logged with the client's
request id (the gateway's `x-request-id`) beside the stream's id, which the LM's log lines name.
"""
from __future__ import annotations

import functools
import gc
import logging
import threading
import time
import uuid
from dataclasses import replace

import numpy as np
import triton_python_backend_utils as pb_utils

from backend_python.vox_ensemble.acks import ACK, AckRoutes, parse_ack
from backend_python.vox_ensemble.relay import INPUT_AUDIO, TEXT
from backend_python.vox_ensemble.cancel_watch import CancelWatch
from backend_python.vox_ensemble.refiner_lanes import RefinerLanes
from backend_python.vox_ensemble.codec_lanes import CodecLanes
from backend_python.stub_common.lane_health import HealPolicy, LaneHealth, ModelControl
from backend_python.vox_ensemble.lm_client import LMClient
from backend_python.vox_ensemble.lane_watch import LaneWatch
from backend_python.vox_ensemble.outlet import FINAL, Outlet
from backend_python.stub_common.responses import error_response
from backend_python.vox_ensemble.relay import Relay
from backend_python.vox_ensemble.stream import Job, PendingReference, as_numpy, typed_request
from backend_python.vox_ensemble.audio_sessions import AudioInLimits, AudioSessions, InputChunker
from backend_python.vox_ensemble.text_sessions import TextSessions, piece_bytes
from backend_python.vox_ensemble.stub_process import StubWatch, stub_is_running
from backend_python.stub_common.encoder_client import VoiceEncoderClient
from backend_python.stub_common import fault_inject
from backend_python.stub_common.chunk_channel import ChunkChannel
from backend_python.stub_common.metrics import RouterMetrics
from backend_python.stub_common.logs import configure_stub_logging, stop_fault_reports
from backend_python.stub_common.params import model_parameters
from audio.stream import StreamAudio
from backend_python.stub_common.reference_inputs import ReferenceLimits, parse_reference
from backend_python.stub_common.request_inputs import (RequestError, RequestLimits, SpeechRequest,
                                                  check_request_parameters, parse_audio_options,
                                                  parse_speech_request, with_start_text)
from backend_python.voice_registry.store import VoiceStore, VoiceStoreSettings
from protocol.models import CODEC, CODEC_URGENT, LANE_MODELS, LM, REFINER_MODELS, VOICE_ENCODER, VOICE_REGISTRY
from protocol.quoting import quoted
from protocol.reasons import ROUTER_STOPPING, Ended, EndReason
from protocol.tensors import MAX_UNREAD_AUDIO_S, PLAYBACK_SPEED, SEQUENCE_END, SEQUENCE_START
from scheduler import ChunkRouter, FlowConfig, LatencyEstimator, PlaybackClock, SchedulerConfig

log = logging.getLogger("voxlane.router")


NO_ID = "-"  # a client that gave its request no id


def _ending(ended: Ended) -> str:
    return ended.reason.value + (f" ({ended.message})" if ended.message else "")


class RouterModel:
    def initialize(self, args: dict) -> None:
        configure_stub_logging()
        params = model_parameters(args)
        self.config = SchedulerConfig.from_dict(params, ignore_unknown=True)
        self.limits = RequestLimits.from_parameters(params)
        self.reference_limits = ReferenceLimits.from_parameters(params)
        self.voices = VoiceStore.from_settings(VoiceStoreSettings.from_parameters(params))  # registered voices
        self.refines = params.get("refines", "false") == "true"  # the served family is a cascade (serve)
        self.metrics = RouterMetrics(tuple(m for m in LANE_MODELS if self.refines or m not in REFINER_MODELS),
                                     refines=self.refines)
        control = ModelControl(pb_utils.unload_model, pb_utils.load_model, pb_utils.is_model_ready, stub_is_running)
        self.lane_health = LaneHealth(control, HealPolicy.from_parameters(params), self.metrics.on_lane_change)
        self._fault_marker = fault_inject.marker_from_env()  # None unless a test turned the hook on
        self.channel = ChunkChannel()
        self.lm = LMClient(self.channel.parameters, self.lane_health)
        self.codecs = CodecLanes(LatencyEstimator.from_config(self.config), self.metrics, self.lane_health)
        self.flow = FlowConfig.from_parameters(params)
        self.ack_routes = AckRoutes()
        self.sessions = TextSessions(self.limits.max_text_chars)
        self.audio_sessions = AudioSessions(AudioInLimits.from_parameters(params))
        self.takes_input_audio = params.get("takes_input_audio", "false") == "true"  # the served family's (serve)
        self.refiners = (RefinerLanes(LatencyEstimator.from_config(self.config), self.metrics, self.lane_health)
                         if self.refines else None)
        refiner_estimator = None if self.refiners is None else self.refiners.estimator
        router = ChunkRouter(self.config, self.codecs.estimator, refiner_estimator)
        self.relay = Relay(self.channel, self.lm, router, self.codecs, self.flow, VoiceEncoderClient(self.lane_health),
                           self.refiners)
        self.cancel_watch = CancelWatch(self.lm.cancel)
        self.cancel_watch.start()
        self.outlet = Outlet(self.metrics, self.cancel_watch)
        self.lm_watch = LaneWatch(StubWatch(LM).is_dead, self._on_lm_dead,
                                  is_lane_available=lambda: self.lane_health.unavailable(LM) is None)
        self.lm_watch.start()
        # a codec lane's dead stub is noticed by its process too, not only by the next chunk that fails on it:
        # under load every chunk may go to the urgent lane and leave a dead background lane unhealed; and the
        # encoder's though no cloning stream meets it
        self.lane_watches = [LaneWatch(StubWatch(model).is_dead, functools.partial(self._on_lane_dead, model),
                                        is_lane_available=functools.partial(self._is_in_service, model), name=model)
                              for model in (CODEC, CODEC_URGENT, VOICE_ENCODER,
                                            *(REFINER_MODELS if self.refines else ()))]
        # the voice registry is no lane (no stream waits on it), but nothing else in the server reloads it
        self.registry_health = LaneHealth(control, HealPolicy.from_parameters(params))
        self.lane_watches.append(LaneWatch(StubWatch(VOICE_REGISTRY).is_dead, self._on_registry_dead,
                                            is_lane_available=self._is_registry_in_service, name=VOICE_REGISTRY))
        for watch in self.lane_watches:
            watch.start()

    def execute(self, requests: list) -> None:
        for request in requests:
            sender = request.get_response_sender()
            if self._take_ack(request, sender) or self._take_piece(request, sender):
                continue
            job = self._admit(request, sender)
            if isinstance(job, Ended):
                log.info("request %s refused: %s", request.request_id() or NO_ID, _ending(job))
                sender.send(error_response(job), flags=FINAL)
                continue
            log.info("request %s: stream %s started", job.request_id or NO_ID, job.stream_id)
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

    def _take_piece(self, request, sender) -> bool:
        """Pass a streaming-text piece on to its stream's relay (text_sessions.py); False when the request is
        not a piece: no session flags, or the session's first request (sequence start)."""
        flags, session_id = request.flags(), request.correlation_id()
        if flags & SEQUENCE_START or not (session_id or flags & SEQUENCE_END):
            return False
        is_final = bool(flags & SEQUENCE_END)
        if self.audio_sessions.knows(session_id):
            return self._take_audio_piece(request, sender, session_id, is_final)
        try:
            self.sessions.check_live(session_id)  # an unknown session first: the likelier mistake
            others = sorted(t.name() for t in request.inputs() if t.name() != "text")
            if others:
                raise RequestError(f"a piece of a session carries only 'text', got {quoted(others[0])}",
                                   param=others[0], code="bad_piece")
            stream_id, text = self.sessions.take(session_id, piece_bytes(as_numpy(request, "text")), is_final)
        except RequestError as exc:
            sender.send(error_response(exc.ended), flags=FINAL)
            return True
        self.channel.post(stream_id, TEXT, (text, is_final))
        sender.send(flags=FINAL)
        return True

    def _take_audio_piece(self, request, sender, session_id, is_final: bool) -> bool:
        """A piece of an audio-in session (audio_sessions.py): checked, then on to its stream's relay."""
        try:
            others = sorted(t.name() for t in request.inputs() if t.name() not in ("input_audio", "input_sample_rate"))
            if others:
                raise RequestError(f"a piece of an audio-in session carries only 'input_audio', got "
                                   f"{quoted(others[0])}", param=others[0], code="bad_piece")
            rate = as_numpy(request, "input_sample_rate")
            stream_id, samples = self.audio_sessions.take(
                session_id, as_numpy(request, "input_audio"), None if rate is None else int(rate.reshape(-1)[0]),
                is_final)
        except RequestError as exc:
            sender.send(error_response(exc.ended), flags=FINAL)
            return True
        self.channel.post(stream_id, INPUT_AUDIO, (samples, is_final))
        sender.send(flags=FINAL)
        return True

    def finalize(self) -> None:
        """End every live stream here, before the stub exits: at SIGTERM the LM's own ending of them
        (`SHUTTING_DOWN`, through the chunk channel) races this unload, and a worker thread that had not
        sent its final response when the stub went left its client with a closed socket instead of a
        reason. Then free the held BLS iterators: left to the stub's own teardown, they kept this model
        from unloading and tritonserver waited out its exit timeout on SIGTERM."""
        stop_fault_reports()
        num_ended = self.outlet.end_all(ROUTER_STOPPING)
        self.channel.end_all(ROUTER_STOPPING)  # wakes their worker threads
        if num_ended:
            log.info("unloading: ended %d live streams", num_ended)
        self.lane_health.stop()
        self.registry_health.stop()
        self.lm_watch.stop()
        for watch in self.lane_watches:
            watch.stop()
        self.cancel_watch.stop()
        self.channel.close()
        self.lm.release_all()
        gc.collect()  # iterators kept alive by reference cycles (e.g. a stored traceback) go too

    def _admit(self, request, sender) -> Job | Ended:
        """Validate a request and copy what its worker thread needs; a refusal is an Ended value."""
        flags = request.flags()
        session_id = request.correlation_id() if flags & SEQUENCE_START and not flags & SEQUENCE_END else None
        try:
            check_request_parameters(request.parameters())
            if (down := self.lane_health.unavailable(LM)) is not None:
                return down
            input_rate = as_numpy(request, "input_sample_rate")
            is_audio_in = session_id is not None and input_rate is not None
            get = (lambda name: None if name == "text" else as_numpy(request, name)) if session_id is not None \
                else (lambda name: as_numpy(request, name))  # a session's text is checked as pieces come
            req: SpeechRequest = parse_speech_request(get, self.limits, is_text_open=session_id is not None)
            if is_audio_in:  # no text: its input audio comes in pieces (audio_sessions.py)
                req = replace(req, is_text_open=False, is_audio_in=True)
            elif input_rate is not None or as_numpy(request, "input_audio") is not None:
                raise RequestError("'input_audio' streams in an audio-in session: open one with the sequence-start "
                                   "flag and 'input_sample_rate'", param="input_audio", code="not_a_session")
            options = parse_audio_options(get)
            reference = parse_reference(get, self.reference_limits)  # a session's: on its first request
            stream_id = uuid.uuid4().hex
            registered = self._registered_voice(req.voice, reference)
            if registered:  # its stored tensors speak for it; the LM knows no such name
                req = replace(req, voice=None)
            audio_in = None
            if is_audio_in:
                audio_in = self._open_audio_session(session_id, stream_id, int(input_rate.reshape(-1)[0]),
                                                    as_numpy(request, "input_audio"))
            elif session_id is not None:
                req = with_start_text(req, self._open_session(session_id, stream_id, request), self.limits,
                                      is_cap_given=as_numpy(request, "max_audio_seconds") is not None)
            inputs = [typed_request(req), *registered, *self._flow_inputs(options.speed)]
            client_id = request.request_id() if req.client_acks else None
            self._register_acks(client_id, stream_id, session_id)
        except RequestError as exc:
            return exc.ended
        except ValueError as exc:  # a registered voice's file is damaged: the server's fault
            return Ended(EndReason.INTERNAL, str(exc))
        return Job(stream_id=stream_id, inputs=inputs, sender=sender,
                   arrival=time.monotonic(), codec_parameters=fault_inject.codec_parameters(self._fault_marker, req.text),
                   audio=StreamAudio(options.audio_format, options.sample_rate, options.speed), client_id=client_id,
                   session_id=session_id, audio_in=audio_in,
                   reference=PendingReference(reference) if reference is not None else None,
                   request_id=request.request_id())

    def _registered_voice(self, voice: str | None, reference) -> list:
        """A `voice` that names a registered voice: its stored tensors, the LM inputs `voice_encoder` would give
        for its reference (no encoder call), which take the place of the name. Else none: any other voice goes on
        to the LM, which knows its presets (registration refuses their names) and refuses an unknown one."""
        registered = self.voices.get(voice) if voice is not None else None
        if registered is None:
            return []
        if reference is not None:
            raise RequestError(f"voice {quoted(voice)} is a registered voice, and 'ref_audio' another reference: "
                               "send one of them", param="voice", code="voice_and_reference")
        return [pb_utils.Tensor(name, array) for name, array in registered.lm_inputs().items()]

    def _open_session(self, session_id, stream_id: str, request) -> str:
        """Open a streaming-text session; its text's start, decoded. The stream's queue exists from here, so no
        piece that follows at once is lost."""
        text = self.sessions.open(session_id, stream_id, piece_bytes(as_numpy(request, "text")))
        self.channel.subscribe(stream_id)
        return text

    def _open_audio_session(self, session_id, stream_id: str, rate: int, audio) -> InputChunker:
        """Open an audio-in session; its stream's input chunker. The stream's queue exists from here, with the
        first request's own piece on it, so no piece that follows at once is lost."""
        if not self.takes_input_audio:
            raise RequestError("this server's model takes no input audio: it speaks text; send 'text' (no "
                               "'input_sample_rate')", param="input_audio", code="input_audio_unsupported")
        samples = self.audio_sessions.open(session_id, stream_id, rate, audio)
        self.channel.subscribe(stream_id)
        if samples.size:
            self.channel.post(stream_id, INPUT_AUDIO, (samples, False))
        return InputChunker(rate, self.audio_sessions.limits)

    def _register_acks(self, client_id: str | None, stream_id: str, session_id) -> None:
        """Route the stream's acks; a refusal undoes the session just opened."""
        if client_id is None:
            return
        try:
            self.ack_routes.register(client_id, stream_id)
        except RequestError:
            if session_id is not None:
                self.sessions.end(session_id)
                self.audio_sessions.end(session_id)
                self.channel.unsubscribe(stream_id)
            raise

    def _flow_inputs(self, speed: float) -> list:
        """The LM's backpressure bound for a stream (none when the server turned it off), and how fast its
        listener plays the model's audio (`speed`)."""
        bound = self.flow.max_unread_audio_s
        if bound <= 0:
            return []
        inputs = [pb_utils.Tensor(MAX_UNREAD_AUDIO_S, np.array([bound], dtype=np.float32))]
        if speed != 1.0:
            inputs.append(pb_utils.Tensor(PLAYBACK_SPEED, np.array([speed], dtype=np.float32)))
        return inputs

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
            if job.session_id is not None:
                self.sessions.end(job.session_id)
                self.audio_sessions.end(job.session_id)
        log.info("request %s: stream %s ended: %s", job.request_id or NO_ID, job.stream_id, _ending(ended))
        self.outlet.end(job, ended)

    def _on_lane_dead(self, model: str) -> None:
        """A codec (refinement, encoder) lane's process died: out of service and reloaded (a codec lane's chunks go
        to the other lane meanwhile)."""
        self.lane_health.on_dead(model, "its stub process exited")

    def _on_registry_dead(self) -> None:
        self.registry_health.on_dead(VOICE_REGISTRY, "its stub process exited")

    def _is_registry_in_service(self) -> bool:
        return self.registry_health.unavailable(VOICE_REGISTRY) is None

    def _is_in_service(self, model: str) -> bool:
        return self.lane_health.unavailable(model) is None

    def _on_lm_dead(self) -> None:
        """The LM's process died: take the lane out of service and end every stream waiting on it."""
        self.lane_health.on_dead(LM, "its stub process exited")
        ended = self.lane_health.unavailable(LM) or Ended(EndReason.LANE_DOWN, f"the {LM} lane is down")
        num_ended = self.outlet.end_all(ended)
        self.channel.end_all(ended)  # wakes their worker threads
        log.error("the LM's process died; ended %d live streams", num_ended)
