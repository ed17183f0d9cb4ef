"""A gRPC streaming client for `vox_ensemble`: one request, its chunks as they arrive."""
from __future__ import annotations

import json

import queue
import time
import uuid
import wave
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from protocol.models import ROUTER
from protocol.reasons import Ended, EndReason
from protocol.tensors import CONTROL_INPUTS, OPTIONAL_INPUTS, REQUEST_INPUTS, scalar_array
from protocol.wire import decode_error


class StreamError(RuntimeError):
    """The server ended the stream with an error: `ended` holds its reason; the message is the server's."""

    def __init__(self, ended: Ended, partial: "StreamResult | None" = None) -> None:
        super().__init__(ended.message)
        self.ended = ended
        self.partial = partial  # what came before the error, where the caller kept it (a session's chunks)


class RouterLost(StreamError):
    """The server's router was unloaded with the stream live: no response of it will come (not even a final
    one), so its gRPC stream is cancelled, not left for the server to finish."""


class ServerUnreachable(ConnectionError):
    """No server answered at the URL (refused, unresolvable or down): nothing was sent."""


@dataclass
class AudioChunk:
    index: int
    audio: np.ndarray  # [n] float32 ([0] with an encoded `audio_format`)
    sample_rate: int
    lane: str
    arrival_s: float  # seconds after the request was sent
    data: bytes | None = None  # `audio_bytes`: the chunk's encoded bytes (only with an encoded `audio_format`)
    words: list[dict] | None = None  # `word_timestamps` (`timestamps` "word"): [{"word", "start", "end"}, ...]


@dataclass
class StreamResult:
    chunks: list[AudioChunk] = field(default_factory=list)

    @property
    def ttfa_s(self) -> float:
        return self.chunks[0].arrival_s

    @property
    def sample_rate(self) -> int:
        return self.chunks[0].sample_rate

    @property
    def audio(self) -> np.ndarray:
        return np.concatenate([c.audio for c in self.chunks]) if self.chunks else np.zeros(0, np.float32)

    @property
    def data(self) -> bytes:
        """The stream's encoded bytes (`audio_format` other than pcm_f32), in order: one whole file."""
        return b"".join(c.data or b"" for c in self.chunks)

    @property
    def audio_seconds(self) -> float:
        return self.audio.size / self.sample_rate if self.chunks else 0.0

    @property
    def words(self) -> list[dict] | None:
        """Every word the stream spoke, in order (`timestamps` "word"); None when not asked for."""
        if not self.chunks or self.chunks[0].words is None:
            return None
        return [word for chunk in self.chunks for word in chunk.words or ()]

    def write_wav(self, path: str | Path) -> None:
        pcm = (np.clip(self.audio, -1.0, 1.0) * 32767.0).astype("<i2")
        with wave.open(str(path), "wb") as out:
            out.setnchannels(1)
            out.setsampwidth(2)
            out.setframerate(self.sample_rate)
            out.writeframes(pcm.tobytes())


def read_wav(path: str | Path) -> tuple[np.ndarray, int]:
    """A PCM WAV file (8, 16, 24 or 32-bit integer samples) as ([n] float32 mono in [-1, 1], sample rate);
    channels are averaged. What `ref_audio` and `ref_sample_rate` take."""
    with wave.open(str(path), "rb") as source:
        width, channels, rate = source.getsampwidth(), source.getnchannels(), source.getframerate()
        data = source.readframes(source.getnframes())
    if width == 1:  # 8-bit WAV is unsigned
        samples = (np.frombuffer(data, np.uint8).astype(np.float32) - 128.0) / 128.0
    else:
        raw = np.frombuffer(data, np.uint8).reshape(-1, width)
        padded = np.zeros((raw.shape[0], 4), np.uint8)
        padded[:, 4 - width:] = raw  # little-endian samples into the top bytes of an int32
        samples = padded.view("<i4").reshape(-1).astype(np.float32) / 2.0 ** 31
    return samples.reshape(-1, channels).mean(axis=1).astype(np.float32), rate


def build_inputs(text: str | bytes, voice: str | None = None, **params) -> list[grpcclient.InferInput]:
    """The request tensors, each of shape [1] but `ref_audio` ([n]); `params` are the other optional inputs
    (e.g. `seed`, `audio_format`, `sample_rate`; a voice to clone: `ref_audio` (np.ndarray [n] float32 mono in
    [-1, 1]), `ref_sample_rate`, `ref_text`, `x_vector_only`)."""
    inputs = [_input("text", text)]
    if voice is not None:
        inputs.append(_input("voice", voice))
    for name, value in params.items():
        if value is None:
            continue
        if name not in OPTIONAL_INPUTS or name == "voice":
            known = sorted(set(OPTIONAL_INPUTS) - {"voice"})
            raise ValueError(f"unknown request parameter {name!r}; known: {known}")
        inputs.append(_input(name, value))
    return inputs


def _input(name: str, value: object) -> grpcclient.InferInput:
    array = scalar_array(name, value)
    tensor = grpcclient.InferInput(name, list(array.shape), REQUEST_INPUTS[name].triton_type)
    tensor.set_data_from_numpy(array)
    return tensor


def synthesize(url: str, text: str | bytes, voice: str | None = None, timeout_s: float = 120.0,
               acks: bool = True, **params) -> StreamResult:
    """Stream one request to the end; raises StreamError with the server's message on failure.

    `acks`: ack each chunk as it arrives (`client_acks`), so the stream runs as fast as the server
    makes it; without, the server paces it to real-time playback plus its `max_unread_audio_s`."""
    inputs = build_inputs(text, voice, client_acks=True if acks else None, **params)
    client = grpcclient.InferenceServerClient(url=url)
    responses: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: responses.put((result, error)))
    request_id = uuid.uuid4().hex
    try:
        started = time.perf_counter()
        try:
            client.async_stream_infer(ROUTER, inputs, request_id=request_id, enable_empty_final_response=True)
        except InferenceServerException:
            pass  # the stream broke before the request went out; its callback queued the reason
        ack = (lambda index: send_ack(client, request_id, index)) if acks else None
        result = _collect(responses, started, timeout_s, url, ack, client)
    except RouterLost:
        close_stream(client, is_ended=False)
        raise
    except StreamError:  # the server's error response ended the request
        close_stream(client, is_ended=True)
        raise
    except BaseException:  # timed out, unreachable, interrupted: the request may still be live
        close_stream(client, is_ended=False)
        raise
    close_stream(client, is_ended=True)
    return result


def close_stream(client: grpcclient.InferenceServerClient, is_ended: bool) -> None:
    """Close a client's stream: cancel it while its request is still live; once the final response came,
    half-close it and let the server finish it.

    Why not always cancel: tritonserver 2.51's gRPC frontend keeps a stream's whole state (its call, its
    response buffers: ~10 kB for a few chunks) for good when the client cancels the stream after its
    request's final response, and frees it when the server finishes the stream itself."""
    client.stop_stream(cancel_requests=not is_ended)
    client.close()


def ack_input(index: int) -> grpcclient.InferInput:
    """The one tensor of an ack: the client has taken every chunk up to `index`."""
    spec = CONTROL_INPUTS["ack_chunk"]
    tensor = grpcclient.InferInput(spec.name, list(spec.shape), spec.triton_type)
    tensor.set_data_from_numpy(np.array([index], dtype=spec.dtype))
    return tensor


def send_ack(client: grpcclient.InferenceServerClient, request_id: str, index: int) -> None:
    """Ack chunk `index` of the stream `request_id` on the client's open stream (no response comes)."""
    try:
        client.async_stream_infer(ROUTER, [ack_input(index)], request_id=request_id)
    except InferenceServerException:
        pass  # the stream has broken: its callback reports why


ROUTER_CHECK_S = 0.5  # with no response for this long, ask whether the router is still loaded
ROUTER_ANSWER_S = 1.0  # then, with the router unloaded, wait this long for the answer it may have sent as it went


def router_lost(client: grpcclient.InferenceServerClient) -> Ended | None:
    """The end of a stream whose router (`vox_ensemble`) is unloaded: its process died or the server is
    stopping, and the stream's responses will never come (the model watch holds a dead router unloaded
    for 2 s before it loads it again, so a check every ROUTER_CHECK_S sees it). None while it is loaded,
    or when the server does not answer (the stream's own callback reports that)."""
    try:
        if client.is_model_ready(ROUTER, client_timeout=2.0):
            return None
    except InferenceServerException as exc:
        if exc.status() in (_UNREACHABLE, _DEADLINE):
            return None  # the server did not answer: not a sign of the router
        # else the server answered that it knows no such model: the router is unloaded
    return Ended(EndReason.LANE_DOWN, "the server's router (vox_ensemble) was unloaded (its process died, or the "
                                      "server is stopping), and this stream with it; retry", code="router_restarted")


def _collect(responses: queue.Queue, started: float, timeout_s: float, url: str, ack=None,
             client: grpcclient.InferenceServerClient | None = None) -> StreamResult:
    result = StreamResult()
    deadline = started + timeout_s
    while True:
        item, error = next_response(responses, deadline, timeout_s, client)
        if error is not None:
            raise StreamError(stream_ended(error, url))
        if item.as_numpy("audio") is not None:
            result.chunks.append(_chunk(item, time.perf_counter() - started))
            if ack is not None:
                ack(result.chunks[-1].index)
        if item.get_response().parameters["triton_final_response"].bool_param:
            return result


def stream_ended(error: Exception, url: str) -> Ended:
    """How the server ended a stream, from the error its callback queued; ServerUnreachable when it could not be
    reached at all."""
    if isinstance(error, InferenceServerException) and error.status() == _UNREACHABLE:
        raise ServerUnreachable(f"cannot reach the server at {url}: {error.message()}")
    return decode_error(error.message() if isinstance(error, InferenceServerException) else str(error))


def next_response(responses: queue.Queue, deadline: float, timeout_s: float,
                   client: grpcclient.InferenceServerClient | None) -> tuple:
    """The stream's next (result, error) from `responses`; TimeoutError past `deadline`; with the stream's
    `client`, StreamError once its router is lost (a dead router's streams would wait out their deadline) and
    ROUTER_ANSWER_S more have brought nothing (an unloading router's own ending of the stream wins)."""
    while True:
        left = deadline - time.perf_counter()
        try:
            return responses.get(timeout=max(0.0, min(left, ROUTER_CHECK_S if client is not None else left)))
        except queue.Empty:
            if time.perf_counter() >= deadline:
                raise TimeoutError(f"stream did not finish within {timeout_s:.0f} s") from None
            lost = router_lost(client)
            if lost is not None:
                try:  # a router that is unloading (a stop) ends its streams itself: its answer may be on its way
                    return responses.get(timeout=ROUTER_ANSWER_S)
                except queue.Empty:
                    raise RouterLost(lost) from None


_UNREACHABLE = "StatusCode.UNAVAILABLE"  # gRPC's status when no connection could be made
_DEADLINE = "StatusCode.DEADLINE_EXCEEDED"


def _chunk(item, arrival_s: float) -> AudioChunk:
    data, words = item.as_numpy("audio_bytes"), item.as_numpy("word_timestamps")
    return AudioChunk(index=int(item.as_numpy("chunk_index")[0]), audio=item.as_numpy("audio"),
                      sample_rate=int(item.as_numpy("sample_rate")[0]),
                      lane=item.as_numpy("lane")[0].decode(), arrival_s=arrival_s,
                      data=None if data is None else bytes(data[0]),
                      words=None if words is None else json.loads(bytes(words.reshape(-1)[0])))
