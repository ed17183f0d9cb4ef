"""Streaming audio in: send a stream's input audio while its output streams back, one Triton sequence per session
(an interleaved model's: target-speaker extraction, `tse-*`).

The session's requests share a `sequence_id` on one gRPC stream: the first (`sequence_start`) carries
`input_sample_rate`, the target speaker's enrollment (`ref_audio`, `ref_sample_rate`, `x_vector_only`), the
sampling inputs and maybe the first piece of `input_audio`; each later one a piece of `input_audio`; the last
`sequence_end`. The audio comes back as responses of the first request. A refused piece gets an error whose code
is in `protocol.tensors.PIECE_ERROR_CODES` (the stream goes on): recorded in `piece_errors`.
"""
from __future__ import annotations

import queue
import secrets
import threading
import time
import uuid
from typing import Iterable

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from clients.stream import _input, build_inputs
from clients.text_stream import TextStreamResult, _collect, run_session
from protocol.models import ROUTER


def stream_audio_in(url: str, pieces: Iterable[np.ndarray], input_sample_rate: int, enroll_audio: np.ndarray,
                    enroll_sample_rate: int, timeout_s: float = 120.0, acks: bool = True, piece_gap_s: float = 0.0,
                    on_chunk=None, **params) -> TextStreamResult:
    """Send `pieces` ([n] float32 each, at `input_sample_rate`) as one session, `piece_gap_s` apart (its real-time
    pace: the piece's duration), then close the input; returns when the stream ends. Raises StreamError when the
    stream itself fails; refused pieces land in `piece_errors`. `on_chunk(chunk)` sees each chunk as it comes (to
    play it); an exception it raises cancels the stream, input and all, and comes out of this call."""
    client = grpcclient.InferenceServerClient(url=url)
    responses: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: responses.put((result, error)))
    request_id, session = uuid.uuid4().hex, secrets.randbits(62) + 1
    result, started = TextStreamResult(), time.perf_counter()
    first = build_inputs("", client_acks=True if acks else None, ref_audio=enroll_audio,
                         ref_sample_rate=enroll_sample_rate, x_vector_only=True, input_sample_rate=input_sample_rate,
                         **params)[1:]  # no `text`: the session speaks what it hears
    sender = threading.Thread(target=_send_pieces, daemon=True, name="voxlane-audio-pieces",
                              args=(client, iter(pieces), session, request_id, result, started, first, piece_gap_s))
    return run_session(client, sender, lambda: _collect(responses, result, started, timeout_s, url, request_id,
                                                        client, acks, on_chunk))


def _piece(samples: np.ndarray) -> list[grpcclient.InferInput]:
    return [_input("input_audio", np.asarray(samples, dtype=np.float32).reshape(-1))]


def _send_pieces(client, pieces, session: int, request_id: str, result: TextStreamResult, started: float,
                 first_inputs: list, gap_s: float) -> None:
    try:
        client.async_stream_infer(ROUTER, first_inputs, request_id=request_id, sequence_id=session,
                                  sequence_start=True, enable_empty_final_response=True)
        for i, piece in enumerate(pieces, start=1):
            if gap_s:
                time.sleep(gap_s)
            client.async_stream_infer(ROUTER, _piece(piece), request_id=f"{request_id}-{i}", sequence_id=session)
        client.async_stream_infer(ROUTER, _piece(np.zeros(0, np.float32)), request_id=f"{request_id}-end",
                                  sequence_id=session, sequence_end=True)
        result.text_done_s = time.perf_counter() - started
    except InferenceServerException:
        pass  # the stream broke: its callback queued the reason
