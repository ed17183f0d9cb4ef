"""What goes back to a stream's client: its chunks (resampled and encoded as it asked) and its one final
response, with their bookkeeping (live streams, the cancel watch, metrics, the playback clock).

A stream that ends done while its encoder still holds audio (no chunk was marked last) gets one more
chunk before the final response: the encoder's tail, numbered after the last chunk, in that chunk's
lane. It is not a decoded chunk, so metrics and the playback clock do not count it."""
from __future__ import annotations

import time

import triton_python_backend_utils as pb_utils

from backend_python.vox_ensemble.cancel_watch import CancelWatch
from backend_python.vox_ensemble.live_streams import LiveStreams
from backend_python.vox_ensemble.stream import DecodedChunk, Job
from backend_python.stub_common.metrics import RouterMetrics
from backend_python.stub_common.responses import error_response
from protocol.reasons import Ended, EndReason
from scheduler import PlaybackClock, first_audio_phases

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


class Outlet:
    def __init__(self, metrics: RouterMetrics, cancel_watch: CancelWatch) -> None:
        self._metrics, self._cancel_watch = metrics, cancel_watch
        self._streams = LiveStreams(self._finish)
        self._last_sent: dict[str, DecodedChunk] = {}  # by stream id: where a tail chunk goes

    @property
    def num_live(self) -> int:
        return len(self._streams)

    def open(self, job: Job) -> None:
        self._metrics.add_live(1)
        self._cancel_watch.add(job.stream_id, job.sender.is_cancelled)
        self._streams.add(job.stream_id, job)

    def send(self, job: Job, chunk: DecodedChunk, clock: PlaybackClock) -> bool:
        """Send one chunk; False when the stream was ended meanwhile (by the LM watch)."""
        piece = None if job.audio.is_passthrough else job.audio.process(chunk.audio, chunk.sample_rate, chunk.is_last)
        response = pb_utils.InferenceResponse(output_tensors=chunk.tensors(piece))
        if not self._streams.send(job.stream_id, lambda: self._deliver(job, chunk, response)):
            return False
        now = time.monotonic()
        deadline = clock.deadline(chunk.index) if chunk.index > 0 else None
        self._metrics.on_chunk(chunk.lane, chunk.reason, None if deadline is None else deadline - now)
        if chunk.index == 0:
            phases = (None if chunk.received_s is None or chunk.decoded_s is None else
                      first_audio_phases(job.arrival, chunk.lm_stamps, chunk.received_s, chunk.decoded_s, now))
            self._metrics.on_first_chunk(now - job.arrival, phases)
        clock.on_sent(chunk.index, chunk.duration_s, now)
        return True

    def is_cancelled(self, job: Job) -> bool:
        """Whether the client is gone (or the stream was ended meanwhile, by the LM watch)."""
        return self._streams.is_cancelled(job.stream_id, job.sender.is_cancelled)

    def _deliver(self, job: Job, chunk: DecodedChunk, response) -> None:
        job.sender.send(response)
        self._last_sent[job.stream_id] = chunk  # under the stream's lock, so never after its end

    def end(self, job: Job, ended: Ended) -> None:
        self._streams.end(job.stream_id, ended)  # a no-op when the LM watch ended it first

    def end_all(self, ended: Ended) -> int:
        return self._streams.end_all(ended)

    def _finish(self, job: Job, ended: Ended) -> None:
        """A stream's final response (LiveStreams calls it once per stream)."""
        self._cancel_watch.remove(job.stream_id)  # before the final response: see CancelWatch
        self._metrics.add_live(-1)
        last = self._last_sent.pop(job.stream_id, None)
        if ended.reason is EndReason.DONE:
            self._send_tail(job, last)
            job.sender.send(flags=FINAL)
        else:
            job.sender.send(error_response(ended), flags=FINAL)

    def _send_tail(self, job: Job, last: DecodedChunk | None) -> None:
        """The encoder's and resampler's held-back audio, when no chunk flushed it (see the module docstring)."""
        piece = job.audio.tail()
        if piece is not None and last is not None:
            tail = DecodedChunk(last.index + 1, last.lane, piece.audio, piece.sample_rate, is_last=True,
                                words=None if last.words is None else b"[]")
            job.sender.send(pb_utils.InferenceResponse(output_tensors=tail.tensors(piece)))
