"""One speech request as a Triton gRPC stream: its audio chunks as they arrive, cancelled when dropped.

The stream is a raw `ModelStreamInfer` call on a `grpc.aio` channel so that the request can ask for
Triton's empty final response (a reserved `triton_` parameter that `tritonclient.grpc.aio`'s
`stream_infer` refuses): that response is how the end of a decoupled stream is known. Closing the
generator early (the HTTP client went away) cancels the call; the router then frees the LM slot.
"""
from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
import numpy as np
from tritonclient.grpc import InferResult, service_pb2
from tritonclient.utils import serialize_byte_tensor

from server.gateway.errors import ApiError, from_ended, from_grpc_error, too_many, unavailable
from server.gateway.limits import Lease
from server.gateway.speech import GatewaySpeechRequest
from protocol.models import ROUTER
from protocol.reasons import EndReason
from protocol.tensors import CONTROL_INPUTS, REQUEST_INPUTS, scalar_array
from protocol.wire import decode_error

FINAL = "triton_final_response"
CLOSE_TIMEOUT_S = 5.0  # how long an ended call may take to finish before it is cancelled


class StreamFailure(Exception):
    """The stream ended with an error; `error` is what the HTTP client is told."""

    def __init__(self, error: ApiError, is_connection: bool = False, reason: EndReason | None = None) -> None:
        super().__init__(error.message)
        self.error = error
        self.is_connection = is_connection  # the server could not be reached (not a refusal)
        self.reason = reason  # the server's reason, when the server answered


@dataclass(frozen=True)
class AudioChunk:
    index: int
    audio: np.ndarray  # [n] float32, mono in [-1, 1]
    sample_rate: int
    lane: str
    arrived_s: float  # perf_counter when the gateway received it
    words: list[dict] | None = None  # with `timestamps` "word": [{"word", "start", "end"}, ...] (seconds as sent)


def infer_request(request: GatewaySpeechRequest) -> service_pb2.ModelInferRequest:
    """The router's request tensors, each of shape [1]; the request's id (a fresh one if it has none)."""
    proto = service_pb2.ModelInferRequest(model_name=ROUTER, id=request.request_id or uuid.uuid4().hex)
    add_input(proto, "text", request.text)
    if request.voice is not None:
        add_input(proto, "voice", request.voice)
    for name, value in request.params.items():
        add_input(proto, name, value)
    proto.parameters["triton_enable_empty_final_response"].bool_param = True
    return proto


def add_input(proto: service_pb2.ModelInferRequest, name: str, value: object) -> None:
    """A router input by its protocol table: [1], or `ref_audio`'s [n]."""
    add_tensor(proto, name, REQUEST_INPUTS[name].triton_type, scalar_array(name, value))


def add_tensor(proto: service_pb2.ModelInferRequest, name: str, datatype: str, array: np.ndarray) -> None:
    proto.inputs.add(name=name, datatype=datatype, shape=list(array.shape))
    raw = serialize_byte_tensor(array).item() if datatype == "BYTES" else array.tobytes()
    proto.raw_input_contents.append(raw)


async def stream_chunks(stub, request: GatewaySpeechRequest, timeout_s: float, lease: Lease | None = None
                        ) -> AsyncIterator[AudioChunk]:
    """Yield each audio chunk as Triton sends it; raise StreamFailure on an error response or RPC failure.

    The stream acks each chunk once the caller asks for the next (`client_acks`): the gateway asks
    when it has written the chunk to its HTTP client, so the server runs at most its bound ahead of
    what that client took, and a client that stops reading stops the stream's generation. Meanwhile the
    stream's responses are read as they come, into a queue that the server's bound keeps small: left in gRPC,
    a slow client's unread responses filled the window of the connection its stream shares with others, and
    held back every stream on it. What the queue holds is charged to the client's `lease` (limits.py): past
    its byte cap the stream is cancelled (`too_many_bytes`)."""
    proto = infer_request(request)
    add_input(proto, "client_acks", True)
    outgoing: asyncio.Queue = asyncio.Queue()  # acks; None closes our half of the stream

    async def requests():
        yield proto
        while (message := await outgoing.get()) is not None:  # open until the final response
            yield message

    call = stub.ModelStreamInfer(requests(), timeout=timeout_s)
    arrivals: asyncio.Queue = asyncio.Queue()  # (chunk, is_final), or the StreamFailure that ends the stream
    reader = asyncio.create_task(_read_responses(call, arrivals, lease))
    is_ended = False  # the final response came: the request is over
    try:
        while True:
            item = await arrivals.get()
            if isinstance(item, StreamFailure):
                raise item
            chunk, is_final = item
            is_ended = is_final
            if chunk is not None:
                yield chunk
                if lease is not None:
                    lease.refund(chunk.audio.nbytes)  # taken: written to its client
                outgoing.put_nowait(ack_request(proto.id, chunk.index))
            if is_final:
                return
    except StreamFailure as exc:
        is_ended = exc.reason is not None  # the server's error response ended the request
        raise
    finally:
        reader.cancel()
        outgoing.put_nowait(None)  # half-closes the call
        await end_call(call, is_ended)


async def _read_responses(call, arrivals: asyncio.Queue, lease: Lease | None) -> None:
    """Every response of `call` into `arrivals` as it comes; the stream's end (a failure) last."""
    try:
        async for response in call:
            chunk, is_final = parse_response(response, time.perf_counter())
            if chunk is not None and lease is not None and not lease.charge(chunk.audio.nbytes):
                arrivals.put_nowait(StreamFailure(too_many("too_many_bytes", "the stream's audio waiting for its "
                                                                             "client passed the client's byte cap: "
                                                                             "it reads too slowly")))
                return
            arrivals.put_nowait((chunk, is_final))
            if is_final:
                return
        raise StreamFailure(unavailable("the Triton stream closed before its final response"), is_connection=True)
    except grpc.aio.AioRpcError as exc:
        is_connection = exc.code() == grpc.StatusCode.UNAVAILABLE
        arrivals.put_nowait(StreamFailure(from_grpc_error(exc), is_connection=is_connection))
    except StreamFailure as exc:
        arrivals.put_nowait(exc)


async def end_call(call, is_ended: bool) -> None:
    """Let the server finish an ended call; cancel one whose request is still live (the client left:
    stop the server's work).

    An ended call is not cancelled: tritonserver 2.51's gRPC frontend keeps a stream's whole state
    (~10 kB for a few chunks) for good when its client cancels it after the final response."""
    if is_ended:
        try:
            await asyncio.wait_for(call.code(), CLOSE_TIMEOUT_S)
            return
        except asyncio.TimeoutError:
            pass
    call.cancel()


def ack_request(request_id: str, index: int) -> service_pb2.ModelInferRequest:
    """An ack on the stream `request_id`: its client has taken every chunk up to `index` (no response comes)."""
    spec = CONTROL_INPUTS["ack_chunk"]
    proto = service_pb2.ModelInferRequest(model_name=ROUTER, id=request_id)
    proto.inputs.add(name=spec.name, datatype=spec.triton_type, shape=list(spec.shape))
    proto.raw_input_contents.append(np.array([index], dtype=spec.dtype).tobytes())
    return proto


def parse_response(response, arrived_s: float) -> tuple[AudioChunk | None, bool]:
    """(the response's audio chunk or None, whether it ends the stream)."""
    if response.error_message:
        ended = decode_error(response.error_message)
        raise StreamFailure(from_ended(ended), reason=ended.reason)
    result = InferResult(response.infer_response)
    is_final = response.infer_response.parameters[FINAL].bool_param
    if result.get_output("audio") is None:
        return None, is_final
    words = result.as_numpy("word_timestamps")
    chunk = AudioChunk(int(result.as_numpy("chunk_index")[0]), result.as_numpy("audio"),
                       int(result.as_numpy("sample_rate")[0]), result.as_numpy("lane")[0].decode(), arrived_s,
                       None if words is None else json.loads(bytes(words.reshape(-1)[0])))
    return chunk, is_final
