"""Triton glue of the LM lane (`speechlm_lm`, decoupled); its sinks are in sinks.py.

`execute` takes each request as the router parsed it (`speech_request`; a direct caller's inputs are parsed
here), builds its prompt (a bad voice fails here, at
once) and hands it to the engine thread; it returns None. The engine sends one
response per chunk: `tokens` INT32 [context + new + lookahead frames, K], `context_frames`
INT32 [1], `chunk_index` INT32 [1], `start_frame` INT32 [1] (the first new frame's index in the
request), `is_last` BOOL [1]; `lookahead_frames` INT32 [1] and `overlap_frames` INT32 [1] only for
a codec with lookahead (models/base.py CodecWindowing); `codec_condition` FP32 [D] for a codec with
a condition — plus `audio` FP32 [n] and `sample_rate` INT32 [1] in timeshare mode, where the codec
runs inline — then the final flag. A direct client's request that fails gets a Triton error response (its
`Ended` in the wire form of protocol/wire.py, INVALID_ARG for bad input: a 400 over HTTP) with the final flag.

The router's requests name its chunk channel (`voxlane_channel` parameters): those get a single
response at once, the final flag (with the `error` output BYTES [1] when refused), and their chunks, the same arrays,
go through the channel (see backend_python/stub_common/chunk_channel.py for why). A `list_voices` request (the
voice registry's, for the voice listing) gets one response: `voices`, the model's preset voice names as JSON. A
`forget_voice` request (the voice registry's, after a delete) carries a deleted voice's tensors: the model drops what
it cached of that voice (its prompt prefixes, models/prompt_cache.py); one response, the final flag.
"""
from __future__ import annotations

import json
import logging
import math
import os
import uuid

import numpy as np
import triton_python_backend_utils as pb_utils

from backend_python.engine.sequence import Sequence
from backend_python.speechlm_lm.prompt_options import option_kwargs, prompt_options
from backend_python.speechlm_lm.reference import check_can_clone, voice_reference
from backend_python.speechlm_lm.sinks import FINAL, ChannelSink, ResponseSink, error_output
from backend_python.speechlm_lm.text import SpeakableText
from backend_python.stub_common import unloads
from backend_python.stub_common.chunk_channel import CHANNEL_PARAMETER, KEY_PARAMETER, ChannelClients, ChannelError
from backend_python.stub_common.metrics import LMMetrics, LMPhaseMetrics, PromptCacheMetrics
from backend_python.stub_common.params import set_up_lane
from backend_python.stub_common.request_inputs import (RequestError, RequestLimits,
                                                  SpeechRequest, parse_speech_request)
from protocol.reasons import Ended, EndReason
from protocol.tensors import (CANCEL, FORGET_VOICE, INPUT_CODES, INPUT_FINAL, LIST_VOICES, MAX_UNREAD_AUDIO_S,
                              PLAYBACK_SPEED, SPEECH_REQUEST, TAKEN_FRAMES, TEXT_FINAL, TEXT_OPEN, TEXT_PIECE,
                              VOICES_OUTPUT)
from scheduler import ServingMode, UnreadBound

log = logging.getLogger("voxlane.lm")


def _is_cancel(request) -> bool:
    tensor = pb_utils.get_input_tensor_by_name(request, CANCEL)
    return tensor is not None and bool(tensor.as_numpy().reshape(-1)[0])


def _scalar_input(request, name: str):
    """An internal input's single value, or None when absent."""
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy().reshape(-1)[0]


def _refuse(sender, ended: Ended) -> None:
    """A router request's single response: the final flag, carrying the error."""
    sender.send(error_output(ended), flags=FINAL)


def _channel_of(request) -> tuple[str, str] | None:
    """(name, key) of the router's chunk channel this request names, or None (a plain Triton stream)."""
    text = request.parameters()
    if CHANNEL_PARAMETER not in text:  # the cheap test first: most direct clients send no parameters
        return None
    params = json.loads(text)
    name, key = params.get(CHANNEL_PARAMETER), params.get(KEY_PARAMETER)
    return (str(name), str(key)) if name and key else None


class RouterMismatch(RuntimeError):
    """The router's parsed request (`speech_request`) does not fit this LM lane: the server's fault, not the
    client's (a router and an LM lane of different versions)."""


class LMModel:
    def initialize(self, args: dict) -> None:
        setup = set_up_lane(args)
        from backend_python.engine.engine import EngineConfig, LMEngine
        from backend_python.models import registry
        params, spec, device, dtype = setup.params, setup.spec, setup.device, setup.lane.dtype
        self.model = registry.load_lm(spec, device=device, dtype=dtype)
        self.family = spec.family
        self.model.use_torch_compile = setup.lane.torch_compile  # read when the engine allocates slots
        self.model.use_fused_predictor = setup.lane.fused_predictor  # the same
        self.model.use_fused_frame = setup.lane.fused_frame  # the same
        self.model.use_fp8_weights = setup.lane.fp8_weights  # the same
        self.cache_metrics = self._cache_prompts(setup.lane.prompt_cache_mib)
        self.limits = RequestLimits.from_parameters(params)
        config = EngineConfig.from_parameters(params, registry.codec_windowing(spec), self.model.num_delay_steps)
        # timeshare: the baseline of existing servers, the codec decodes inline in the LM loop
        self.codec = (registry.load_codec(spec, device=device, dtype=dtype, steps=setup.lane.codec_steps)
                      if config.scheduler.mode is ServingMode.TIMESHARE else None)
        if self.codec is not None:
            self.codec.use_torch_compile = setup.lane.codec_compile  # as the codec lanes (Codec.capture_graphs)
        self.metrics = LMMetrics(config.max_slots)
        # a cascade in timeshare refines inline too (its refinement lanes are not loaded)
        refiner = registry.load_refiner(spec, device=device, dtype=dtype) if self.codec is not None else None
        self.engine = LMEngine(self.model, config, self._inline_codec(setup.lane.cuda_graphs, setup.lane.stream_states),
                               on_step=self.metrics.on_step, refiner=refiner)
        self.device = device
        self.channels = ChannelClients()
        self.phase_metrics = LMPhaseMetrics(self.engine.phases.drain)
        self.engine.start()
        self.phase_metrics.start()
        if self.cache_metrics is not None:
            self.cache_metrics.start()

    def _cache_prompts(self, budget_mib: int) -> PromptCacheMetrics | None:
        """Give a model that caches voice prompt prefixes its cache -> the cache's metrics (None without one)."""
        from backend_python.models.prompt_cache import PromptCache
        if not self.model.caches_prompts or (cache := PromptCache.of_mib(budget_mib)) is None:
            return None
        self.model.prompt_cache = cache
        return PromptCacheMetrics(cache.stats)

    def _inline_codec(self, use_cuda_graphs: bool, stream_states: bool):
        """The timeshare codec behind the same runner (and CUDA graphs) as the codec lanes: a fair baseline."""
        if self.codec is None:
            return None
        from backend_python.engine.codec_runner import CodecRunner
        from backend_python.engine.codec_states import CodecStateLimits
        runner = CodecRunner(self.codec, use_cuda_graphs=use_cuda_graphs,
                             stream_states=CodecStateLimits() if stream_states else None)
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
        if _scalar_input(request, LIST_VOICES) is not None:  # the voice registry's listing
            sender.send(self._voices_response(), flags=FINAL)
            return
        if _scalar_input(request, FORGET_VOICE) is not None:  # the voice registry deleted a registered voice
            self._forget_voice(request)
            sender.send(flags=FINAL)
            return
        if _is_cancel(request):  # a control request from the router: its client went away
            self.engine.cancel_id(request.request_id())
            sender.send(flags=FINAL)
            return
        if (taken := _scalar_input(request, TAKEN_FRAMES)) is not None:  # the router: the client took more
            self.engine.set_taken(request.request_id(), int(taken))
            sender.send(flags=FINAL)
            return
        if (is_final := _scalar_input(request, INPUT_FINAL)) is not None:  # the router: more input frames
            self.engine.add_input(request.request_id(), self._input_frames(request), bool(is_final))
            sender.send(flags=FINAL)
            return
        if (piece := _scalar_input(request, TEXT_PIECE)) is not None:  # the router: more streamed text
            self.engine.add_text(request.request_id(), bytes(piece).decode("utf-8"),
                                 bool(_scalar_input(request, TEXT_FINAL)))
            sender.send(flags=FINAL)
            return
        channel = _channel_of(request)
        refuse = (lambda ended: _refuse(sender, ended)) if channel else ResponseSink(sender, None).end
        request_id = request.request_id() or uuid.uuid4().hex
        try:
            seq = self._sequence(request, request_id, self._sink(sender, channel, request_id), channel is not None)
        except RequestError as exc:
            refuse(exc.ended)
            return
        except (ChannelError, RouterMismatch) as exc:
            refuse(Ended(EndReason.INTERNAL, str(exc)))
            return
        if not self.engine.try_add(seq):
            limit = self.engine.config.max_queued
            refuse(Ended(EndReason.OVERLOADED,
                         f"server overloaded: {limit} requests already wait for the LM lane; retry later"))
            return
        if channel:
            sender.send(flags=FINAL)  # accepted: the chunks follow through the channel

    def _voices_response(self):
        """The model's preset voice names (`voices`, JSON), in the model's order."""
        names = json.dumps(list(self.model.voices)).encode("utf-8")
        return pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor(VOICES_OUTPUT, np.array([names], dtype=np.object_))])

    def _input_frames(self, request):
        """An input control request's frames ([N, K] int64; none: [0, K])."""
        import torch

        tensor = pb_utils.get_input_tensor_by_name(request, INPUT_CODES)
        if tensor is None:
            return torch.zeros(0, self.model.num_codebooks, dtype=torch.int64)
        return torch.from_numpy(tensor.as_numpy().astype("int64").copy())

    def _sink(self, sender, channel: tuple[str, str] | None, request_id: str):
        if channel is None:
            return ResponseSink(sender, self.sample_rate)
        return ChannelSink(self.channels.connect(*channel), request_id, self.sample_rate)

    def _sequence(self, request, request_id: str, sink, from_router: bool) -> Sequence:
        import torch

        from backend_python.models.base import SamplingParams
        from backend_python.models.layers.seeding import seeded_generator

        def get(name):
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            return None if tensor is None else tensor.as_numpy()

        req = self._speech_request(request, get, from_router)
        reference = voice_reference(get)
        check_can_clone(self.model, reference, req.is_text_open, req.voice)
        options = option_kwargs(self.model, prompt_options(self.model, req))
        is_known_voice = req.voice is None or req.voice in self.model.voices
        max_frames = max(1, round(req.max_audio_seconds * self.model.frame_rate))
        try:
            text = self._open_text(req, reference, options) if req.is_text_open else None
            if req.is_audio_in:
                prompt = self._open_input(reference)
            else:
                prompt = (self.model.encode_prompt(req.text, req.voice, reference=reference, **options)
                          if text is None else text.prompt())
            is_chapter = text is None and not req.is_audio_in and not self._fits(prompt.num_tokens, max_frames)
            if is_chapter:  # too long for one prompt: segment by segment, one stream
                text = self._chapter(req, reference, options)
                prompt = text.prompt()
                self._check_chapter(text, max_frames, req.ignore_eos)
            sampling = SamplingParams(req.temperature, req.top_k, req.top_p, req.repetition_penalty)
        except RequestError:
            raise
        except ValueError as exc:
            raise (RequestError(str(exc)) if is_known_voice
                   else RequestError(f"{exc}; no voice is registered under that name either (voice_registry)",
                                     param="voice", code="unknown_voice")) from None
        seed = req.seed if req.seed is not None else int.from_bytes(os.urandom(8), "little") >> 1
        generator = seeded_generator(seed, self.device)  # every bit of the seed counts (seeding.py)
        if not is_chapter and not (text is not None and text.is_segmented):  # a segment: checked at its prefill
            self._check_fits(prompt.num_tokens if text is None else text.num_prompt_tokens, max_frames)
        return Sequence(request_id=request_id, prompt=prompt,
                        sampling=sampling, ignore_eos=req.ignore_eos, max_frames=max_frames,
                        sink=sink, generator=generator, unread=self._unread_bound(request, req.client_acks),
                        text=text, text_idle_timeout_s=req.text_idle_timeout_s,
                        codec_prefix=None if prompt is None else self.model.codec_prefix(prompt),
                        words=self._word_clock(req) if req.word_timestamps and not req.is_audio_in else None)

    def _open_input(self, reference):
        """An audio-in stream's prompt: the enrollment in, its input frames to come (models/input_feed.py)."""
        if not self.model.takes_input:
            raise RequestError(f"this model ({type(self.model).__name__}) takes no input audio: it speaks text; "
                               "send 'text' instead", param="input_audio", code="input_audio_unsupported")
        if reference is None:
            raise RequestError("an audio-in session needs the target speaker's enrollment: 'ref_audio' with "
                               "'ref_sample_rate' and 'x_vector_only'", param="ref_audio", code="missing_ref_audio")
        return self.model.open_input(reference)

    def _speech_request(self, request, get, from_router: bool) -> SpeechRequest:
        """The router's parsed request (`speech_request`), else a direct caller's inputs parsed here. Only the
        router's requests, which name its chunk channel, may carry a parsed one: it skips the limits' checks."""
        typed = _scalar_input(request, SPEECH_REQUEST)
        if typed is None:
            return parse_speech_request(get, self.limits, is_text_open=bool(_scalar_input(request, TEXT_OPEN)))
        if not from_router:
            raise RequestError(f"{SPEECH_REQUEST!r} is the router's input; send the request's own inputs",
                               param=SPEECH_REQUEST, code="invalid_input")
        try:
            return SpeechRequest.from_json(bytes(typed).decode("utf-8"))
        except ValueError as exc:  # UnicodeDecodeError too: the router's fault, not the client's
            raise RouterMismatch(f"the router's parsed request does not fit this LM lane: {exc}") from None

    def _word_clock(self, req: SpeechRequest):
        """The stream's word timestamps (engine/word_clock.py): its text so far, and whether more comes."""
        from backend_python.engine.word_clock import WordClock

        clock = WordClock(self.model.frame_rate)
        clock.add_text(req.text, 0)
        if not req.is_text_open:
            clock.close_text()
        return clock

    def _open_text(self, req: SpeechRequest, reference, options: dict) -> SpeakableText:
        """A streaming-text request's text, its first piece in (a family whose prompt needs the whole text
        speaks it segment by segment); a voice to clone goes to a family `open_text` that takes one."""
        from backend_python.models.text_segments import open_streamed_text

        feed = (self.model.open_text(req.voice, reference=reference, **options) if reference is not None
                else open_streamed_text(self.model, req.voice, **options))
        text = SpeakableText(feed)
        text.append(req.text)
        return text

    def _chapter(self, req: SpeechRequest, reference, options: dict) -> SpeakableText:
        """A whole text that does not fit one prompt and its frames in `max_seq_len` (a chapter), closed: cut
        at sentence ends and spoken as one stream of segments (models/text_segments.py, WHOLE_TEXT_RULES)."""
        from backend_python.models.text_segments import open_whole_text

        return SpeakableText(open_whole_text(self.model, req.text, req.voice, reference, **options))

    def _unread_bound(self, request, acks: bool) -> UnreadBound | None:
        """The backpressure bound the router asks for (`max_unread_audio_s`); none without it."""
        seconds = _scalar_input(request, MAX_UNREAD_AUDIO_S)
        if seconds is None or not float(seconds) > 0:
            return None
        rate = self.model.frame_rate
        speed = float(_scalar_input(request, PLAYBACK_SPEED) or 1.0)  # its listener plays the frames this fast
        return UnreadBound(max_unread_frames=max(1, math.ceil(float(seconds) * rate)), frame_rate=rate * speed,
                           acks=acks)

    def _check_chapter(self, text: SpeakableText, max_frames: int, ignore_eos: bool) -> None:
        """A chapter's first segment, and with `ignore_eos` its last (which runs on to max_frames), must fit
        one slot's keys; the engine checks every segment again at its prefill (engine/segments.py)."""
        limit = (None if text.is_last else text.budget_frames()) if ignore_eos else text.cap_frames()
        self._check_fits(text.prompt().num_tokens, max_frames if limit is None else min(limit, max_frames))
        if ignore_eos and not text.is_last:
            self._check_fits(text.num_prompt_tokens, max_frames - text.frames_before_last())

    def _fits(self, num_prompt_tokens: int, max_frames: int) -> bool:
        return self._length_error(num_prompt_tokens, max_frames) is None

    def _check_fits(self, num_prompt_tokens: int, max_frames: int) -> None:
        """Refuse at once what the engine would fail at prefill (its own check stays): it is bad input."""
        error = self._length_error(num_prompt_tokens, max_frames)
        if error is not None and self.model.takes_input:  # a session's cap: say the longest that fits
            fit_s = self._most_frames(num_prompt_tokens) / self.model.frame_rate
            raise RequestError(f"{error}: an audio-in session's max_audio_seconds may be at most {fit_s:.2f} s on "
                               "this server", param="max_audio_seconds")
        if error is not None:
            raise RequestError(error)

    def _most_frames(self, num_prompt_tokens: int) -> int:
        """The most frames a stream of this prompt fits (kv_positions_for grows with the frames)."""
        low, high = 0, self.engine.config.max_seq_len
        while low < high:
            mid = (low + high + 1) // 2
            low, high = (mid, high) if self._length_error(num_prompt_tokens, mid) is None else (low, mid - 1)
        return low

    def _length_error(self, num_prompt_tokens: int, max_frames: int) -> str | None:
        needed = self.model.kv_positions_for(num_prompt_tokens, max_frames)
        return self.engine.config.length_error(needed, num_prompt_tokens, max_frames)

    def _forget_voice(self, request) -> None:
        """Drop what the model cached of a deleted voice (its tensors are the request's reference inputs)."""
        def get(name: str):
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            return None if tensor is None else tensor.as_numpy()
        try:
            reference = voice_reference(get)
        except RequestError as exc:
            log.warning("forget_voice without a voice's tensors: %s", exc.ended.message)
            return
        if reference is not None:
            log.info("a deleted voice's cached prompts dropped: %d", self.model.forget_voice(reference))

    def finalize(self) -> None:
        unloads.mark_unloaded()  # an unload, not a death, for the router's watch of this lane
        self.phase_metrics.stop()
        if self.cache_metrics is not None:
            self.cache_metrics.stop()
        self.engine.stop()
        self.channels.close()

