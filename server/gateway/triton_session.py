"""One streaming-text session as a Triton sequence on one gRPC stream (docs/STREAMING.md: "Streaming text in").

The first request (`sequence_start`) carries the voice and sampling inputs and an empty text; every
piece the client appends follows as a request with only `text` and the same `sequence_id`, and the
close as one with `sequence_end`. Sending the client's first text as a piece, not in the first request,
lets the server answer a bad first text as it answers any bad piece (a refusal; the session goes on).
The audio comes back as responses of the first request, acked as in `triton_stream.stream_chunks`.
A refused piece's error (its code in PIECE_ERROR_CODES) becomes a `PieceRefused` event; any other
error ends the session.
"""
from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

import grpc
import numpy as np
from tritonclient.grpc import service_pb2

from server.gateway.errors import ApiError, from_ended, from_grpc_error, unavailable
from server.gateway.speech import GatewaySpeechRequest
from server.gateway.triton_stream import (AudioChunk, StreamFailure, ack_request, add_input, end_call,
                                           infer_request, parse_response)
from protocol.models import ROUTER
from protocol.tensors import PIECE_ERROR_CODES
from protocol.wire import decode_error


@dataclass(frozen=True)
class PieceRefused:
    """The server refused one piece; the piece changed nothing and the session goes on."""

    error: ApiError


SessionEvent = AudioChunk | PieceRefused


class SessionText:
    """The text a client has sent so far, passed on to the Triton session that serves it.

    The pieces are kept until the session's first event, so that a server that refuses the session
    before that can be replaced by another that gets the same pieces (`Gateway.speak_text`)."""

    def __init__(self) -> None:
        self.is_closed = False
        self._pieces: list[str | np.ndarray] | None = []  # None: forgotten, the session can no longer move
        self._session: TritonSession | None = None
        self.is_audio = False  # the pieces are input audio ([n] float32) of an audio-in session, not text

    def append(self, piece: str | np.ndarray) -> None:
        if self._pieces is not None:
            self._pieces.append(piece)
        if self._session is not None:
            self._session.send_piece(piece, is_last=False)

    @property
    def empty_piece(self) -> str | np.ndarray:
        return np.zeros(0, np.float32) if self.is_audio else ""

    def close(self) -> None:
        self.is_closed = True
        if self._session is not None:
            self._session.send_piece(self.empty_piece, is_last=True)

    @property
    def can_replay(self) -> bool:
        return self._pieces is not None

    def attach(self, session: TritonSession) -> None:
        """Send `session` every piece so far (and the close), then each new one as it comes."""
        if self._pieces is None:
            raise RuntimeError("the session's pieces were forgotten: it cannot start on another server")
        for piece in self._pieces:
            session.send_piece(piece, is_last=False)
        if self.is_closed:
            session.send_piece(self.empty_piece, is_last=True)
        self._session = session

    def detach(self, session: TritonSession) -> None:
        if self._session is session:
            self._session = None

    def forget(self) -> None:
        """The client has seen an event: the session stays on its server, the pieces need not be kept."""
        self._pieces = None


class TritonSession:
    """One session's requests on one gRPC stream, and its events as they arrive."""

    def __init__(self, stub, request: GatewaySpeechRequest, text: SessionText, timeout_s: float) -> None:
        self._stub, self._timeout_s = stub, timeout_s
        self._session_id = secrets.randbits(62) + 1  # one live session per id on a server: random, never 0
        self._first = session_request(request, self._session_id)
        self._num_pieces = 0
        self._outgoing: asyncio.Queue = asyncio.Queue()  # pieces and acks; None half-closes the call
        self._text = text
        text.attach(self)

    def send_piece(self, piece: str | np.ndarray, is_last: bool) -> None:
        self._num_pieces += 1
        self._outgoing.put_nowait(piece_request(f"{self._first.id}-{self._num_pieces}", self._session_id,
                                                piece, is_last))

    async def events(self) -> AsyncIterator[SessionEvent]:
        """Each chunk and refused piece as it comes; raises StreamFailure when the session ends in error.

        A chunk is acked once the caller asks for the next event (it has written the chunk), so the
        server runs at most its bound ahead of what the client took."""
        call = self._stub.ModelStreamInfer(self._requests(), timeout=self._timeout_s)
        is_ended = False  # the first request's final response came: the session is over
        try:
            async for response in call:
                event, is_ended = self._read(response)
                if event is not None:
                    self._text.forget()
                    yield event
                    if isinstance(event, AudioChunk):
                        self._outgoing.put_nowait(ack_request(self._first.id, event.index))
                if is_ended:
                    return
            raise StreamFailure(unavailable("the Triton stream closed before its final response"), is_connection=True)
        except grpc.aio.AioRpcError as exc:
            raise StreamFailure(from_grpc_error(exc), is_connection=exc.code() == grpc.StatusCode.UNAVAILABLE) from None
        except StreamFailure as exc:
            is_ended = exc.reason is not None  # the server's error response ended the session
            raise
        finally:
            self._text.detach(self)
            self._outgoing.put_nowait(None)
            await end_call(call, is_ended)

    async def _requests(self):
        yield self._first
        while (message := await self._outgoing.get()) is not None:  # open until the final response
            yield message

    def _read(self, response) -> tuple[SessionEvent | None, bool]:
        """(the response's event or None, whether it ends the session)."""
        if response.error_message:
            ended = decode_error(response.error_message)
            if ended.code in PIECE_ERROR_CODES:
                return PieceRefused(from_ended(ended)), False
            raise StreamFailure(from_ended(ended), reason=ended.reason)
        if response.infer_response.id != self._first.id:
            return None, False  # a piece's or an ack's own final response
        return parse_response(response, time.perf_counter())


def session_request(request: GatewaySpeechRequest, session_id: int) -> service_pb2.ModelInferRequest:
    """The session's first request: its inputs with an empty text, acks on, the sequence-start flag."""
    proto = infer_request(replace(request, text=""))
    add_input(proto, "client_acks", True)
    _set_sequence(proto, session_id, is_start=True, is_end=False)
    return proto


def piece_request(request_id: str, session_id: int, piece: str | np.ndarray,
                  is_last: bool) -> service_pb2.ModelInferRequest:
    """One piece of the session's text, or of its input audio (`is_last`: it closes it); only `text` or
    `input_audio`, no response is asked for."""
    proto = service_pb2.ModelInferRequest(model_name=ROUTER, id=request_id)
    if isinstance(piece, str):
        add_input(proto, "text", piece)
    else:
        add_input(proto, "input_audio", piece)
    _set_sequence(proto, session_id, is_start=False, is_end=is_last)
    return proto


def _set_sequence(proto: service_pb2.ModelInferRequest, session_id: int, is_start: bool, is_end: bool) -> None:
    """Triton's sequence parameters, as tritonclient sets them."""
    proto.parameters["sequence_id"].int64_param = session_id
    proto.parameters["sequence_start"].bool_param = is_start
    proto.parameters["sequence_end"].bool_param = is_end
