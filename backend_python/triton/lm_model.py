"""Triton glue of the LM lane (`speechlm_lm`, decoupled).

`execute` parses each request, builds its prompt (a bad voice fails here, at
once) and hands it to the engine thread; it returns None. The engine sends one
response per chunk: `tokens` INT32 [context + new frames, K], `context_frames`
INT32 [1], `chunk_index` INT32 [1] — plus `audio` FP32 [n] and `sample_rate`
INT32 [1] in timeshare mode, where the codec runs inline — then the final flag. A request that
fails gets one response with only `error` BYTES [1] (the message), then the final flag.

The router's requests name its chunk channel (`voxlane_channel` parameters): those get a single
response at once, the final flag (with `error` when refused), and their chunks, the same arrays,
go through the channel (see chunk_channel.py for why).
"""
from __future__ import annotations

import json
import logging
import os
import uuid

import numpy as np
import triton_python_backend_utils as pb_utils

from backend_python.engine.reasons import CANCELLED
from backend_python.engine.sequence import Chunk, Sequence
from backend_python.triton.chunk_channel import CHANNEL_PARAMETER, CHUNK, END, KEY_PARAMETER, ChannelClients, ChannelError
from backend_python.triton.metrics import LMMetrics, LMPhaseMetrics
from backend_python.triton.params import set_up_lane
from backend_python.triton.request_inputs import (RequestError, RequestLimits,
                                                  SpeechRequest, parse_speech_request)
from scheduler import ServingMode

log = logging.getLogger("voxlane.lm")
FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def _is_cancel(request) -> bool:
    tensor = pb_utils.get_input_tensor_by_name(request, "cancel")
    return tensor is not None and bool(tensor.as_numpy().reshape(-1)[0])


class ClientGone(RuntimeError):
    """The request was cancelled: stop generating for it."""


class ResponseSink:
    """Delivers one request's chunks through its Triton response sender."""

    def __init__(self, sender, sample_rate: int | None) -> None:
        self._sender = sender
        self._sample_rate = sample_rate  # set when chunks carry inline-decoded audio

    def emit(self, chunk: Chunk) -> None:
        if self._sender.is_cancelled():  # the engine then drops the request and frees its slot
            raise ClientGone("the client cancelled the request")
        tensors = [pb_utils.Tensor(name, array) for name, array in chunk_arrays(chunk, self._sample_rate).items()]
        self._sender.send(pb_utils.InferenceResponse(output_tensors=tensors))

    def finish(self, error: str | None) -> None:
        # every stream ends with a plain final flag, and an error travels before it as the `error`
        # output: through BLS in Triton 2.51 an error response never ended the router's response
        # iterator, and tritonserver then hung at shutdown (the router's model never unloaded)
        if error is not None and error != CANCELLED:
            self._sender.send(_error_response(error))
        self._sender.send(flags=FINAL)


def chunk_arrays(chunk: Chunk, sample_rate: int | None) -> dict:
    """A chunk's outputs by name, as numpy arrays."""
    arrays = {"tokens": chunk.tokens.numpy().astype(np.int32),
              "context_frames": np.array([chunk.context_frames], dtype=np.int32),
              "chunk_index": np.array([chunk.chunk_index], dtype=np.int32)}
    if chunk.audio is not None:
        arrays["audio"] = chunk.audio.numpy().astype(np.float32, copy=False)
        arrays["sample_rate"] = np.array([sample_rate], dtype=np.int32)
    return arrays


class ChannelSink:
    """Delivers one request's chunks through the router's chunk channel (its Triton request has ended)."""

    def __init__(self, connection, stream_id: str, sample_rate: int | None) -> None:
        self._connection = connection
        self._stream_id = stream_id
        self._sample_rate = sample_rate

    def emit(self, chunk: Chunk) -> None:
        self._connection.send(self._stream_id, CHUNK, chunk_arrays(chunk, self._sample_rate))

    def finish(self, error: str | None) -> None:
        self._connection.send(self._stream_id, END, error)


def _error_response(message: str):
    """A response carrying only the `error` output BYTES [1]."""
    error = np.array([message.encode("utf-8")], dtype=np.object_)
    return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("error", error)])


def _refuse(sender, message: str) -> None:
    """A router request's single response: the final flag, carrying the error."""
    sender.send(_error_response(message), flags=FINAL)


def _channel_of(request) -> tuple[str, str] | None:
    """(name, key) of the router's chunk channel this request names, or None (a plain Triton stream)."""
    text = request.parameters()
    if CHANNEL_PARAMETER not in text:  # the cheap test first: most direct clients send no parameters
        return None
    params = json.loads(text)
    name, key = params.get(CHANNEL_PARAMETER), params.get(KEY_PARAMETER)
    return (str(name), str(key)) if name and key else None


class LMModel:
    def initialize(self, args: dict) -> None:
        setup = set_up_lane(args)
        from backend_python.engine.engine import EngineConfig, LMEngine
        from backend_python.models import registry
        params, spec, device, dtype = setup.params, setup.spec, setup.device, setup.lane.dtype
        self.model = registry.load_lm(spec, device=device, dtype=dtype)
        self.model.use_torch_compile = setup.lane.torch_compile  # read when the engine allocates slots
        self.limits = RequestLimits.from_parameters(params)
        config = EngineConfig.from_parameters(params, registry.family_of(spec).codec_left_context_frames(spec))
        # timeshare: the baseline of existing servers, the codec decodes inline in the LM loop
        self.codec = (registry.load_codec(spec, device=device, dtype=dtype)
                      if config.scheduler.mode is ServingMode.TIMESHARE else None)
        self.metrics = LMMetrics()
        self.engine = LMEngine(self.model, config, self._inline_codec(setup.lane.cuda_graphs),
                               on_step=self.metrics.on_step)
        self.device = device
        self.channels = ChannelClients()
        self.phase_metrics = LMPhaseMetrics(self.engine.phases.drain)
        self.engine.start()
        self.phase_metrics.start()

    def _inline_codec(self, use_cuda_graphs: bool):
        """The timeshare codec behind the same runner (and CUDA graphs) as the codec lanes: a fair baseline."""
        if self.codec is None:
            return None
        from backend_python.engine.codec_runner import CodecRunner
        runner = CodecRunner(self.codec, use_cuda_graphs=use_cuda_graphs)
        runner.warm_up()
        return runner

    @property
    def sample_rate(self) -> int | None:
        return self.codec.sample_rate if self.codec is not None else None

    def execute(self, requests: list) -> None:
        for request in requests:
            self._submit(request)
        return None

    def _submit(self, request) -> None:
        sender = request.get_response_sender()
        if _is_cancel(request):  # a control request from the router: its client went away
            self.engine.cancel_id(request.request_id())
            sender.send(flags=FINAL)
            return
        channel = _channel_of(request)
        refuse = (lambda message: _refuse(sender, message)) if channel else ResponseSink(sender, None).finish
        request_id = request.request_id() or uuid.uuid4().hex
        try:
            seq = self._sequence(request, request_id, self._sink(sender, channel, request_id))
        except (RequestError, ChannelError) as exc:
            refuse(str(exc))
            return
        if not self.engine.try_add(seq):
            limit = self.engine.config.max_queued
            refuse(f"server overloaded: {limit} requests already wait for the LM lane; retry later")
            return
        if channel:
            sender.send(flags=FINAL)  # accepted: the chunks follow through the channel

    def _sink(self, sender, channel: tuple[str, str] | None, request_id: str):
        if channel is None:
            return ResponseSink(sender, self.sample_rate)
        return ChannelSink(self.channels.connect(*channel), request_id, self.sample_rate)

    def _sequence(self, request, request_id: str, sink) -> Sequence:
        import torch

        from backend_python.models.base import SamplingParams

        def get(name):
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            return None if tensor is None else tensor.as_numpy()

        req: SpeechRequest = parse_speech_request(get, self.limits)
        try:
            prompt = self.model.encode_prompt(req.text, req.voice)
            sampling = SamplingParams(req.temperature, req.top_k, req.top_p, req.repetition_penalty, req.seed)
        except ValueError as exc:
            raise RequestError(str(exc)) from None
        seed = req.seed if req.seed is not None else int.from_bytes(os.urandom(8), "little") >> 1
        generator = torch.Generator(device=self.device).manual_seed(seed)
        max_frames = max(1, round(req.max_audio_seconds * self.model.frame_rate))
        return Sequence(request_id=request_id, prompt=prompt,
                        sampling=sampling, ignore_eos=req.ignore_eos, max_frames=max_frames,
                        sink=sink, generator=generator)

    def finalize(self) -> None:
        self.phase_metrics.stop()
        self.engine.stop()
        self.channels.close()

