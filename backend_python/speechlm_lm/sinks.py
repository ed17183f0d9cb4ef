"""Where the LM engine's chunks and endings go: a direct client's Triton stream, or the router's chunk channel.

The engine ends a request with None (done), `EndReason.CANCELLED`, an error string (a failed
prefill or step: an internal failure) or an `Ended` value (`SHUTTING_DOWN` when it stops; a
streaming-text request's text was bad or stopped coming); `ended_of` turns that into the `Ended`
value both sinks send.
"""
from __future__ import annotations

import json

import numpy as np
import triton_python_backend_utils as pb_utils

from backend_python.engine.sequence import Chunk
from protocol.channel import ChannelKind
from protocol.reasons import CANCELLED_BY_CLIENT, DONE, Ended, EndReason
from protocol.wire import encode_error
from backend_python.stub_common.responses import error_response

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


class ClientGone(RuntimeError):
    """The request was cancelled: stop generating for it."""


def ended_of(error: str | EndReason | Ended | None) -> Ended:
    """The engine's end of a request as a value (an `Ended` already is one)."""
    if isinstance(error, Ended):
        return error
    if error is None:
        return DONE
    if error is EndReason.CANCELLED:
        return CANCELLED_BY_CLIENT
    return Ended(EndReason.INTERNAL, error)


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

    def finish(self, error) -> None:
        self.end(ended_of(error))

    def end(self, ended: Ended) -> None:
        # a direct client's stream (the router's requests name its channel: never this sink) ends with a Triton
        # error response where it failed, coded by its reason (a 400 over HTTP for the client's own bad input). The
        # router's single response carries the `error` output instead (`error_output`): through BLS in Triton 2.51
        # an error response never ended the router's response iterator, and tritonserver then hung at shutdown
        if ended.is_error:
            self._sender.send(error_response(ended), flags=FINAL)
        else:
            self._sender.send(flags=FINAL)


class ChannelSink:
    """Delivers one request's chunks through the router's chunk channel (its Triton request has ended)."""

    def __init__(self, connection, stream_id: str, sample_rate: int | None) -> None:
        self._connection = connection
        self._stream_id = stream_id
        self._sample_rate = sample_rate

    def emit(self, chunk: Chunk) -> None:
        arrays = chunk_arrays(chunk, self._sample_rate)
        if chunk.first_stamps is not None:  # the router's first-audio phases (scheduler/first_audio.py)
            arrays["first_stamps"] = np.array(chunk.first_stamps, dtype=np.float64)
        self._connection.send(self._stream_id, ChannelKind.CHUNK, arrays)

    def finish(self, error) -> None:
        self._connection.send(self._stream_id, ChannelKind.END, ended_of(error))


def chunk_arrays(chunk: Chunk, sample_rate: int | None) -> dict:
    """A chunk's outputs by name, as numpy arrays."""
    arrays = {"tokens": chunk.tokens.numpy().astype(np.int32),
              "context_frames": np.array([chunk.context_frames], dtype=np.int32),
              "chunk_index": np.array([chunk.chunk_index], dtype=np.int32),
              "start_frame": np.array([chunk.start_frame], dtype=np.int32),
              "is_last": np.array([chunk.is_last], dtype=np.bool_)}
    if chunk.lookahead_frames:  # a codec with lookahead (absent: 0)
        arrays["lookahead_frames"] = np.array([chunk.lookahead_frames], dtype=np.int32)
        arrays["overlap_frames"] = np.array([chunk.overlap_frames], dtype=np.int32)
    if chunk.condition is not None:
        arrays["codec_condition"] = chunk.condition.numpy().astype(np.float32, copy=False).reshape(-1)
    if chunk.refine_context is not None:  # a cascade's chunk: the refinement lane reads it (models/base.py)
        arrays["refine_context"] = chunk.refine_context.numpy().astype(np.int32, copy=False).reshape(-1)
        arrays["segment_start"] = np.array([chunk.segment_start], dtype=np.int32)
    if chunk.words is not None:  # the client asked for word timestamps (`timestamps`)
        words = json.dumps([word.to_json() for word in chunk.words], ensure_ascii=False)
        arrays["words"] = np.array([words.encode("utf-8")], dtype=np.object_)
    if chunk.audio is not None:
        arrays["audio"] = chunk.audio.numpy().astype(np.float32, copy=False)
        arrays["sample_rate"] = np.array([sample_rate], dtype=np.int32)
    return arrays


def error_output(ended: Ended):
    """A response carrying only the `error` output BYTES [1]: the ending in its wire form (the router's requests)."""
    error = np.array([encode_error(ended).encode("utf-8")], dtype=np.object_)
    return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("error", error)])
