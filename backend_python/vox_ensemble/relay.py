"""One stream's relay loop: get the LM's next chunk → route it → decode it → send it; returns how it ended."""
from __future__ import annotations

import json
import logging
import queue
import time
from dataclasses import replace
from typing import Callable

import numpy as np

from backend_python.vox_ensemble.acks import ACK
from backend_python.vox_ensemble.codec_lanes import CodecLanes, StreamPlace
from backend_python.vox_ensemble.lm_client import LMClient
from backend_python.vox_ensemble.overlap_join import OverlapJoin
from backend_python.vox_ensemble.refiner_lanes import RefinerLanes, RefineTrack
from backend_python.vox_ensemble.stream import DecodedChunk, Job
from backend_python.stub_common.encoder_client import VoiceEncoderClient
from backend_python.stub_common.reference_inputs import ReferenceAudio
from protocol.tensors import INPUT_CHUNK_PARAMETER
from backend_python.stub_common.chunk_channel import ChunkChannel
from protocol.channel import ChannelKind
from protocol.reasons import CANCELLED_BY_CLIENT, Ended, EndReason
from scheduler import AckedFlow, ChunkRouter, FlowConfig, Lane, LMStamps, PlaybackClock

log = logging.getLogger("voxlane.relay")

TEXT = "text"  # the kind of a streaming-text piece on its stream's queue: (text, is_final), for the LM
INPUT_AUDIO = "input_audio"  # the kind of an audio-in piece: (samples [n] float32, is_final), coded for the LM
_STALL_POLL_S = 0.5  # how often an acking stream that hears nothing checks whether its client stalled
# what a relay returns when the stream was ended from outside (the LM watch) while its chunk was ready
ENDED_ELSEWHERE = Ended(EndReason.LANE_DOWN, "the stream was ended by the router (its LM lane died)")


class Relay:
    def __init__(self, channel: ChunkChannel, lm: LMClient, router: ChunkRouter, codecs: CodecLanes,
                 flow: FlowConfig, encoder: VoiceEncoderClient, refiners: RefinerLanes | None = None) -> None:
        self._channel, self._lm, self._router, self._codecs, self._flow = channel, lm, router, codecs, flow
        self._refiners = refiners
        self._encoder = encoder

    def run(self, job: Job, clock: PlaybackClock, send: Callable[[DecodedChunk], bool],
            is_cancelled: Callable[[], bool]) -> Ended:
        """Relay `job`'s chunks to `send` (False: the stream was ended meanwhile) until the stream ends;
        `is_cancelled()`: the client is gone (or the stream was ended elsewhere: Outlet.is_cancelled)."""
        messages = self._channel.subscribe(job.stream_id)  # before the LM can send anything
        try:
            refused = self._start(job)
            return refused if refused is not None else self._pump(job, clock, send, is_cancelled, messages)
        finally:
            self._channel.unsubscribe(job.stream_id)

    def _start(self, job: Job) -> Ended | None:
        """Encode the stream's reference audio (if any), then hand the stream to the LM; None when it accepted."""
        if job.reference is not None:
            reference = self._encoder.encode(job.reference.take(), job.codec_parameters)
            if isinstance(reference, Ended):
                return reference
            job = replace(job, inputs=job.inputs + reference)
        return self._lm.start(job)

    def _pump(self, job: Job, clock: PlaybackClock, send, is_cancelled, messages) -> Ended:
        flow = AckedFlow(self._flow.max_unread_audio_s, self._flow.stall_timeout_s) if job.acks else None
        seams, track = OverlapJoin(), RefineTrack()
        while True:
            try:  # the LM's death wakes it too (the channel's end_all)
                kind, payload = messages.get(timeout=_STALL_POLL_S) if flow is not None else messages.get()
            except queue.Empty:
                kind, payload = None, None
            if kind is ChannelKind.END:  # the LM ended the stream: done, cancelled or failed
                return payload
            if is_cancelled():  # the client is gone: stop the LM stream, decode nothing more
                self._lm.cancel(job.stream_id)
                return CANCELLED_BY_CLIENT
            if kind == TEXT:  # a piece of the stream's text: on to the LM, in order
                self._lm.send_text(job.stream_id, *payload)
            if kind == INPUT_AUDIO and (failed := self._send_input(job, *payload)) is not None:
                self._lm.cancel(job.stream_id)
                return failed
            if flow is not None and (stalled := self._on_flow(job, flow, kind, payload)) is not None:
                return stalled
            if kind is not ChannelKind.CHUNK:
                continue
            chunk = self._decoded(payload, clock, job, seams, track)
            if isinstance(chunk, Ended):  # this stream cannot go on: free its LM slot too
                self._lm.cancel(job.stream_id)
                return chunk
            if not send(chunk):
                return ENDED_ELSEWHERE
            if flow is not None:
                flow.on_sent(chunk.index, chunk.duration_s, _end_frame(payload), time.monotonic())

    def _send_input(self, job: Job, samples: np.ndarray, is_final: bool) -> Ended | None:
        """A piece of the stream's input audio: each whole chunk it completes (and, at the close, the rest) coded
        by the voice encoder lane and its new frames on to the LM, in order; None, or why the stream cannot go
        on (the encoder failed or is down)."""
        chunker = job.audio_in
        for window in chunker.push(samples, is_final):
            if window.new_frames == 0:
                self._lm.send_input(job.stream_id, None, window.is_last)
                continue
            chunk = ReferenceAudio(window.audio, chunker.sample_rate, None, False)
            coded = self._encoder.encode(chunk, {**job.codec_parameters, INPUT_CHUNK_PARAMETER: True})
            if isinstance(coded, Ended):
                return coded
            codes = next((np.asarray(t.as_numpy()) for t in coded if t.name() == "ref_codes"), None)
            if codes is None or codes.ndim != 2 or codes.shape[0] < window.new_frames:
                return Ended(EndReason.INTERNAL, "the voice encoder gave no codes for a chunk of the input audio "
                                                 "(this model's encoder does not code audio)")
            self._lm.send_input(job.stream_id, codes[codes.shape[0] - window.new_frames:], window.is_last)
        return None

    def _on_flow(self, job: Job, flow: AckedFlow, kind, payload) -> Ended | None:
        """An ack (tell the LM when it is due) or a quiet spell (a stalled client is cancelled)."""
        now = time.monotonic()
        if kind == ACK and flow.on_ack(payload, now):
            self._lm.update_taken(job.stream_id, flow.told_frames)
        if flow.is_stalled(now):
            self._lm.cancel(job.stream_id)
            return Ended(EndReason.CANCELLED, f"stream cancelled: its client acked no audio for "
                                              f"{flow.stall_timeout_s:g} s (the server's stall_timeout_s)")
        return None

    def _decoded(self, arrays: dict, clock: PlaybackClock, job: Job, seams: OverlapJoin,
                 track: RefineTrack) -> DecodedChunk | Ended:
        """Route and decode one LM chunk (its arrays by output name), a cascade's refined first on the lane it
        was routed to; its seam with the chunk before is cross-faded where the codec returned an overlap."""
        index = int(arrays["chunk_index"][0])
        now = time.monotonic()
        route = self._router.route(clock, index, now, self._codecs.batch_size_if_joined(Lane.BACKGROUND),
                                   self._urgent_in_flight(), self._refine_batch_size(arrays, track))
        lane = route.lane
        tokens = self._refined(arrays, lane, job, track)
        if isinstance(tokens, Ended):
            return tokens
        decoded = (_inline_audio(arrays) if lane is Lane.INLINE
                   else self._codecs.decode(lane, tokens, int(arrays["context_frames"][0]),
                                            job.codec_parameters, _place(job.stream_id, arrays),
                                            _scalar(arrays, "lookahead_frames"), arrays.get("codec_condition")))
        if isinstance(decoded, Ended):
            return decoded
        audio, sample_rate = decoded
        audio = seams.join(audio, _tail_samples(arrays, audio.shape[0]))
        chunk = DecodedChunk(index, lane, audio, sample_rate, is_last=bool(arrays.get("is_last", [False])[0]),
                             reason=route.reason, words=_words(arrays, job.audio.speed), speed=job.audio.speed)
        if index == 0:  # its first-audio phases (Outlet.send)
            chunk = replace(chunk, received_s=now, decoded_s=time.monotonic(), lm_stamps=_lm_stamps(arrays))
        clock.on_emitted(index, chunk.duration_s)
        return chunk

    def _urgent_in_flight(self) -> int:
        """Calls in flight on the urgent lane (the budget's count): codec_urgent's, and refiner_urgent's, which
        runs on the same whole GPU."""
        refining = 0 if self._refiners is None else self._refiners.in_flight(Lane.URGENT)
        return self._codecs.in_flight(Lane.URGENT) + refining

    def _refine_batch_size(self, arrays: dict, track: RefineTrack) -> int | None:
        """The batch a cascade's chunk would join on the background refinement lane; None where the chunk needs
        no refinement call (no cascade, no refiners, or a window refined already)."""
        if "refine_context" not in arrays or self._refiners is None or not track.needs_refinement(arrays):
            return None
        return self._refiners.batch_size_if_joined(Lane.BACKGROUND)

    def _refined(self, arrays: dict, lane: Lane, job: Job, track: RefineTrack) -> np.ndarray | Ended:
        """The chunk's window as the codec takes it: as the LM sent it, or a cascade's refined to whole frames."""
        if "refine_context" not in arrays or lane is Lane.INLINE:  # inline: the LM lane refined and decoded it
            return arrays["tokens"]
        if self._refiners is None:
            return Ended(EndReason.INTERNAL, "a cascade's chunk reached a router without refinement lanes "
                                             "(its server runs no refiner: serve the model with `voxlane serve`)")
        return track.window(arrays, self._refiners, lane, job.codec_parameters)


def _words(arrays: dict, speed: float) -> bytes | None:
    """The LM's `words` of a chunk as sent (their times in the audio after `speed`); None: not asked for."""
    if "words" not in arrays:
        return None
    data = bytes(arrays["words"].reshape(-1)[0])
    if speed == 1.0:
        return data
    words = [{**word, "start": round(word["start"] / speed, 3), "end": round(word["end"] / speed, 3)}
             for word in json.loads(data)]
    return json.dumps(words, ensure_ascii=False).encode("utf-8")


def _lm_stamps(arrays: dict) -> LMStamps | None:
    """The LM's stamps on a stream's first chunk, where it sent them (scheduler/first_audio.py)."""
    stamps = arrays.get("first_stamps")
    try:
        return None if stamps is None else LMStamps.from_values(np.asarray(stamps).reshape(-1))
    except ValueError:
        log.warning("a first chunk's LM stamps were malformed (%r); its first-audio phases leave them out", stamps)
        return None


def _scalar(arrays: dict, name: str) -> int:
    """An optional INT32 [1] output of the LM's chunk; 0 when absent."""
    return int(arrays[name].reshape(-1)[0]) if name in arrays else 0


def _new_frames(arrays: dict) -> int:
    return arrays["tokens"].shape[0] - int(arrays["context_frames"][0]) - _scalar(arrays, "lookahead_frames")


def _tail_samples(arrays: dict, num_samples: int) -> int:
    """Samples of `num_samples` past the chunk's new frames: its overlap, for the next chunk's seam."""
    overlap = _scalar(arrays, "overlap_frames")
    return num_samples * overlap // (_new_frames(arrays) + overlap) if overlap else 0


def _end_frame(arrays: dict) -> int:
    """The stream's frame count once this LM chunk is taken: its first new frame plus its new frames."""
    return int(arrays["start_frame"][0]) + _new_frames(arrays) if "start_frame" in arrays else 0


def _place(stream_id: str, arrays: dict) -> StreamPlace | None:
    """Where the chunk sits in its stream (an LM that sends no `start_frame` names none)."""
    if "start_frame" not in arrays:
        return None
    return StreamPlace(stream_id, int(arrays["start_frame"][0]), bool(arrays["is_last"][0]))


def _inline_audio(arrays: dict) -> tuple[np.ndarray, int] | Ended:
    """(audio, sample_rate) that the LM decoded itself (timeshare)."""
    if "audio" not in arrays:
        return Ended(EndReason.INTERNAL, "the LM lane sent no inline audio: is speechlm_lm in timeshare mode too?")
    return arrays["audio"].reshape(-1), int(arrays["sample_rate"].reshape(-1)[0])
