"""Streaming text in: speak a text while it is still being written, one Triton sequence per session.

The session's requests share a `sequence_id` on one gRPC stream: the first (`sequence_start`) carries
the text's start and the voice and sampling inputs, each later one a `text` piece, the last
`sequence_end` (its text may be empty). The audio comes back as responses of the first request. A
refused piece gets an error whose code is in `protocol.tensors.PIECE_ERROR_CODES` (the stream goes
on); this client records those in `piece_errors` instead of ending the stream.
"""
from __future__ import annotations

import queue
import secrets
import threading
import time
import uuid
from typing import Callable, Iterable

import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from clients.stream import (AudioChunk, StreamError, StreamResult, _chunk, build_inputs, close_stream, next_response,
                            send_ack, stream_ended)
from protocol.models import ROUTER
from protocol.tensors import PIECE_ERROR_CODES


class TextStreamResult(StreamResult):
    """A session's audio, the pieces the server refused, and when the text was closed."""

    def __init__(self) -> None:
        super().__init__()
        self.piece_errors: list = []  # the Ended of each refused piece, in arrival order
        self.text_done_s: float | None = None  # seconds after the first request when sequence_end was sent


def speak_streaming_text(url: str, pieces: Iterable[str | bytes], voice: str | None = None, timeout_s: float = 120.0,
                         acks: bool = True, on_chunk: Callable[[AudioChunk], None] | None = None,
                         **params) -> TextStreamResult:
    """Send `pieces` as one session (the first with `params`), each as the iterable yields it (it may wait:
    an LLM's pace), then close the text; returns when the stream ends. Raises StreamError when the stream
    itself fails; refused pieces land in `piece_errors`."""
    client = grpcclient.InferenceServerClient(url=url)
    responses: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: responses.put((result, error)))
    request_id, session = uuid.uuid4().hex, secrets.randbits(62) + 1
    result, started = TextStreamResult(), time.perf_counter()
    sender = threading.Thread(target=_send_pieces, daemon=True, name="voxlane-text-pieces",
                              args=(client, iter(pieces), session, request_id, result, started,
                                    build_inputs("", voice, client_acks=True if acks else None, **params)))
    return run_session(client, sender, lambda: _collect(responses, result, started, timeout_s, url, request_id,
                                                        client, acks, on_chunk))


def run_session(client, sender: threading.Thread, collect: Callable[[], TextStreamResult]) -> TextStreamResult:
    """Start a session's piece sender and collect its stream; then close the stream as `close_stream` does:
    half-closed once the session's final response came (a cancel after it would leave the stream's state in
    tritonserver 2.51 for good: tens of kB a session), cancelled while the session may still be live."""
    is_ended = False
    try:
        sender.start()
        result = collect()
        is_ended = True
        return result
    except StreamError:  # the stream's own final response: an error
        is_ended = True
        raise
    finally:
        close_stream(client, is_ended)


def _send_pieces(client, pieces, session: int, request_id: str, result: TextStreamResult, started: float,
                 first_inputs: list) -> None:
    """The first request (the first piece in `first_inputs`' text), each later piece, then the close."""
    try:
        first = next(pieces, "")
        first_inputs[0] = build_inputs(first)[0]
        client.async_stream_infer(ROUTER, first_inputs, request_id=request_id, sequence_id=session,
                                  sequence_start=True, enable_empty_final_response=True)
        for i, piece in enumerate(pieces, start=1):
            client.async_stream_infer(ROUTER, build_inputs(piece), request_id=f"{request_id}-{i}", sequence_id=session)
        client.async_stream_infer(ROUTER, build_inputs(""), request_id=f"{request_id}-end", sequence_id=session,
                                  sequence_end=True)
        result.text_done_s = time.perf_counter() - started
    except InferenceServerException:
        pass  # the stream broke: its callback queued the reason


def _collect(responses: queue.Queue, result: TextStreamResult, started: float, timeout_s: float, url: str,
             request_id: str, client, acks: bool, on_chunk) -> TextStreamResult:
    deadline = started + timeout_s
    while True:
        item, error = next_response(responses, deadline, timeout_s, client)
        if error is not None:
            ended = stream_ended(error, url)
            if ended.code in PIECE_ERROR_CODES:
                result.piece_errors.append(ended)
                continue
            raise StreamError(ended, partial=result)
        if item.get_response().id != request_id:
            continue  # a piece's own final flag
        if item.as_numpy("audio") is not None:
            result.chunks.append(_chunk(item, time.perf_counter() - started))
            if on_chunk is not None:
                on_chunk(result.chunks[-1])
            if acks:
                send_ack(client, request_id, result.chunks[-1].index)
        if item.get_response().parameters["triton_final_response"].bool_param:
            return result
