"""The HTTP side: OpenAI's routes on aiohttp, each speech request streamed as its chunks arrive.

The status line waits for the stream's first chunk: Triton answers a bad or refused request at
once, so errors still get their own status code (400, 503, …) while audio starts with no delay.
An error after the first chunk ends an SSE stream with an `error` event and aborts a raw audio
stream (the client sees a truncated transfer, never a short file that looks complete).
"""
from __future__ import annotations

import asyncio
import logging
import socket
import time
from contextlib import aclosing
from dataclasses import replace

from aiohttp import web

from audio.encoders import ChunkEncoder
from protocol.formats import FORMATS
from protocol.quoting import quoted
from audio.pcm import with_wav_sizes
from server.gateway.auth import bearer, is_open_path, needs_admin
from server.gateway.audio import audio_delta, audio_done, error_event
from server.gateway.errors import INVALID_REQUEST, SERVER_ERROR, ApiError, bad_request, load_json, request_timeout
from server.gateway.limits import ADDRESS, KEY, Lease
from server.gateway.playground import add_playground_routes
from server.gateway.service import Gateway
from server.gateway.listings import audio_models_json, model_json, voice_listing
from server.gateway.request_ids import current_id, on_response_prepare, request_id_of
from server.gateway.speech import OPENAI_PCM_RATE, GatewaySpeechRequest, model_not_found, served_models
from server.gateway.speech_socket import serve_socket
from server.gateway.triton_stream import AudioChunk, StreamFailure
from server.gateway.voices import (MAX_UPLOAD_BYTES, merged_delete, merged_list, merged_register, no_server,
                                    read_upload, registry_request, upload_param)

log = logging.getLogger("voxlane.gateway")
GATEWAY = web.AppKey("gateway", Gateway)
MAX_BODY_BYTES = 1 << 20


def build_app(gateway: Gateway) -> web.Application:
    app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[traced, json_errors, authenticate, limit_clients])
    app[GATEWAY] = gateway
    app.on_response_prepare.append(on_response_prepare)
    app.add_routes([web.post("/v1/audio/speech", speech), web.get("/v1/audio/speech/stream", speech_stream),
                    web.post("/v1/audio/voices", register_voice), web.get("/v1/audio/voices", list_voices),
                    web.delete("/v1/audio/voices/{name}", delete_voice), web.get("/v1/audio/models", audio_models),
                    web.get("/v1/models", models), web.get("/v1/models/{model}", model), web.get("/health", health),
                    web.get("/metrics", metrics)])
    add_playground_routes(app)
    return app


UNLOGGED_PATHS = ("/health", "/metrics")  # probes and scrapes, every few seconds: their id is on the response only


@web.middleware
async def traced(request: web.Request, handler) -> web.StreamResponse:
    """The request's id (request_ids.py) on every log line while it is handled, and one line when it ends."""
    token = current_id.set(request_id_of(request))  # reset after: a keep-alive connection's next request is another
    started = time.perf_counter()
    status: int | str = "cancelled"  # the client went away before an answer
    try:
        response = await handler(request)
        status = response.status
        return response
    except web.HTTPException as exc:  # a redirect, say: json_errors answers the others itself
        status = exc.status
        raise
    finally:
        if request.path not in UNLOGGED_PATHS:
            log.info("%s %s %s %.3f s", request.method, request.path, status, time.perf_counter() - started)
        current_id.reset(token)


@web.middleware
async def json_errors(request: web.Request, handler) -> web.StreamResponse:
    """aiohttp's own refusals (413 for a body over MAX_BODY_BYTES, 405, 404 for an unknown path) in
    OpenAI's JSON shape too, like every other error of the gateway."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        error = ApiError(exc.status, _http_error_message(request, exc), INVALID_REQUEST if exc.status < 500
                         else SERVER_ERROR, code=exc.reason.lower().replace(" ", "_"))
        response = error_response(request.app[GATEWAY], error)
        if isinstance(exc, web.HTTPMethodNotAllowed):
            response.headers["Allow"] = ", ".join(sorted(exc.allowed_methods))
        return response
    except (asyncio.CancelledError, ConnectionResetError):
        raise  # the client went away: nobody to answer
    except Exception as exc:  # a bug of ours: logged with its trace, answered as OpenAI's JSON, never text/plain
        log.exception("%s %s failed", request.method, request.path)
        return error_response(request.app[GATEWAY], ApiError(500, f"the gateway failed: {type(exc).__name__}",
                                                             SERVER_ERROR, None, "internal_error"))


@web.middleware
async def authenticate(request: web.Request, handler) -> web.StreamResponse:
    """API keys (auth.py): a call without the key it needs is answered 401 (403: a registry write with an
    API key where admin keys are set) before any work."""
    gateway = request.app[GATEWAY]
    if not is_open_path(request.path):
        refused = gateway.config.keys.check(request.headers.get("Authorization"), needs_admin(request))
        if refused is not None:
            response = error_response(gateway, refused)
            if refused.status == 401:
                response.headers["WWW-Authenticate"] = 'Bearer realm="voxlane"'
            return response
    return await handler(request)


# the routes that hold a stream (a speech request, a WebSocket session, a voice upload), and the most their body
# may be when it comes without a length (chunked)
STREAM_ROUTES = {("POST", "/v1/audio/speech"): MAX_BODY_BYTES, ("GET", "/v1/audio/speech/stream"): 0,
                 ("POST", "/v1/audio/voices"): MAX_UPLOAD_BYTES}
LEASE = web.RequestKey("lease", Lease)


@web.middleware
async def limit_clients(request: web.Request, handler) -> web.StreamResponse:
    """Each stream counts against its client's caps (limits.py), and is refused with 429 past one of them, before
    its body is read. Its connection's send buffer is made small, so that a client that stops reading is seen at
    once (and its stream paused on the server) rather than after the kernel took megabytes for it."""
    most = STREAM_ROUTES.get((request.method, request.path.rstrip("/")))
    if most is None:
        return await handler(request)
    gateway = request.app[GATEWAY]
    body_bytes = request.content_length if request.content_length is not None else most
    lease = gateway.clients.admit(identities(request, gateway), body_bytes)
    if isinstance(lease, ApiError):
        return error_response(gateway, lease)
    request[LEASE] = lease
    _limit_send_buffer(request, gateway.config.send_buffer_bytes)
    try:
        return await handler(request)
    finally:
        lease.release()


def identities(request: web.Request, gateway: Gateway) -> tuple[tuple[str, str], ...]:
    """Who the client is: its address, and its API key where keys are set (authenticate checked it)."""
    address = ((ADDRESS, request.remote or ""),)
    key = bearer(request.headers.get("Authorization")) if not gateway.config.keys.is_open else None
    return address + (((KEY, key),) if key else ())


def _limit_send_buffer(request: web.Request, num_bytes: int) -> None:
    connection = request.transport.get_extra_info("socket") if request.transport is not None else None
    if connection is not None and connection.family in (socket.AF_INET, socket.AF_INET6):
        connection.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, num_bytes)


async def read_body(request: web.Request, gateway: Gateway) -> bytes | ApiError:
    """The request's body, or a 408 where it did not arrive within the read timeout (its connection then closes:
    what is left of the body is not waited for)."""
    try:
        return await asyncio.wait_for(request.read(), gateway.config.read_timeout_s)
    except asyncio.TimeoutError:
        return request_timeout(gateway.config.read_timeout_s)


def _http_error_message(request: web.Request, exc: web.HTTPException) -> str:
    if isinstance(exc, web.HTTPRequestEntityTooLarge):
        return f"the request body is larger than the limit of {MAX_BODY_BYTES} bytes"
    if isinstance(exc, web.HTTPMethodNotAllowed):
        return f"{request.method} is not allowed on {request.path}; use {', '.join(sorted(exc.allowed_methods))}"
    if isinstance(exc, web.HTTPNotFound):
        return f"no route {request.method} {request.path}"
    return exc.reason


def error_response(gateway: Gateway, error: ApiError) -> web.Response:
    gateway.stats.num_errors[error.status] += 1
    response = web.json_response(error.to_json(), status=error.status, headers=error.headers)
    if error.status == 408:  # the body is still coming, or never will: the connection is not read further
        response.force_close()
    return response


async def speech(request: web.Request) -> web.StreamResponse:
    gateway = request.app[GATEWAY]
    raw = await read_body(request, gateway)
    if isinstance(raw, ApiError):
        return error_response(gateway, raw)
    try:
        body = load_json(raw)
    except ValueError as exc:
        return error_response(gateway, bad_request(f"the request body is not valid JSON: {exc}"))
    parsed = await gateway.parse_speech(body)
    request[LEASE].refund(request[LEASE].num_bytes)  # read and parsed: from now the lease holds the unread audio
    del raw, body
    if isinstance(parsed, ApiError):
        return error_response(gateway, parsed)
    parsed = replace(parsed, request_id=request_id_of(request))
    if parsed.word_timestamps and (parsed.stream_format != "sse" or not parsed.is_streamed):
        return error_response(gateway, bad_request("timestamps 'word' come as SSE events: send 'stream_format': "
                                                   "'sse' (or use the WebSocket route)", param="timestamps"))
    gateway.stats.num_streams += 1
    async with aclosing(gateway.stream_speech(parsed, request[LEASE])) as chunks:
        if not parsed.is_streamed:
            return await _whole_file(gateway, parsed, chunks)
        try:
            first = await anext(chunks, None)
        except StreamFailure as exc:
            return error_response(gateway, exc.error)
        return await _relay(request, gateway, parsed, first, chunks)


async def _relay(request: web.Request, gateway: Gateway, speech_request: GatewaySpeechRequest,
                 first: AudioChunk | None, chunks) -> web.StreamResponse:
    sample_rate = first.sample_rate if first else OPENAI_PCM_RATE  # no audio came: the header's rate only
    writer = _Writer(request, gateway, speech_request, sample_rate)
    await writer.start()
    num_chunks = 0
    chunk = first
    try:
        while chunk is not None:
            await writer.write_chunk(chunk)
            num_chunks += 1
            chunk = await anext(chunks, None)
    except ClientTooSlow as exc:  # drop it: closing `chunks` (the caller's) cancels the Triton stream
        log.warning("dropped a client: %s", exc)
        if request.transport is not None:
            request.transport.abort()
        return writer.response
    except StreamFailure as exc:
        gateway.stats.num_errors[exc.error.status] += 1
        if speech_request.stream_format != "sse":
            raise  # aborts the connection: a raw audio stream has no way to say "error"
        await writer.response.write(error_event(exc.error.to_json()))
        return writer.response
    await writer.finish(num_chunks)
    return writer.response


async def _whole_file(gateway: Gateway, speech_request: GatewaySpeechRequest, chunks) -> web.Response:
    """`stream`: false: every chunk read (and acked) as it comes, then one response of known length; an error at
    any point is an error response (nothing was sent before it)."""
    fmt, encoder, parts = FORMATS[speech_request.response_format], None, []
    try:
        async for chunk in chunks:
            encoder = encoder or ChunkEncoder(fmt, chunk.sample_rate, speech_request.sample_rate)
            parts.append(encoder.encode(chunk.audio))
    except StreamFailure as exc:
        return error_response(gateway, exc.error)
    encoder = encoder or ChunkEncoder(fmt, OPENAI_PCM_RATE, speech_request.sample_rate)
    body = b"".join(parts) + encoder.finish()
    body = with_wav_sizes(body) if fmt.name == "wav" else body
    return web.Response(body=body, headers={"Content-Type": fmt.content_type, "X-Sample-Rate": str(encoder.rate)})


class _Writer:
    """One response in the request's format and rate, encoded chunk by chunk; raw or as SSE events."""

    def __init__(self, request: web.Request, gateway: Gateway, speech_request: GatewaySpeechRequest, sample_rate: int):
        self.request, self.gateway, self.speech_request = request, gateway, speech_request
        fmt = FORMATS[speech_request.response_format]
        self._encoder = ChunkEncoder(fmt, sample_rate, speech_request.sample_rate)
        is_sse = speech_request.stream_format == "sse"
        content_type = "text/event-stream" if is_sse else fmt.content_type
        self.response = web.StreamResponse(headers={"Content-Type": content_type, "Cache-Control": "no-cache",
                                                    "X-Sample-Rate": str(self._encoder.rate)})
        self.response.enable_chunked_encoding()

    async def start(self) -> None:
        await self.response.prepare(self.request)

    async def write_chunk(self, chunk: AudioChunk) -> None:
        about = {"chunk_index": chunk.index, "lane": chunk.lane}
        if chunk.words is not None:
            about["words"] = chunk.words
        await self._write(self._encoder.encode(chunk.audio), about)
        self.gateway.stats.on_chunk_written(time.perf_counter() - chunk.arrived_s)

    async def finish(self, num_chunks: int) -> None:
        is_sse = self.speech_request.stream_format == "sse"
        await self._write(self._encoder.finish())  # the codec's delay; a stream with no audio: its header alone
        if is_sse:
            await self.response.write(audio_done(len(self.speech_request.text), num_chunks))
        await self.response.write_eof()

    async def _write(self, data: bytes, chunk: dict | None = None) -> None:
        if data:  # a compressed format may hold a short chunk back until the next one
            is_sse = self.speech_request.stream_format == "sse"
            timeout_s = self.gateway.config.write_timeout_s
            try:  # the write returns once the socket has taken the bytes: a client that reads nothing stalls it
                await asyncio.wait_for(self.response.write(audio_delta(data, chunk) if is_sse else data), timeout_s)
            except asyncio.TimeoutError:
                raise ClientTooSlow(f"it took no bytes for {timeout_s:g} s (the gateway's write timeout)") from None


class ClientTooSlow(Exception):
    """The HTTP client stopped taking the response's bytes."""


async def speech_stream(request: web.Request) -> web.StreamResponse:
    """Streaming text in over a WebSocket (speech_socket.py)."""
    return await serve_socket(request, request.app[GATEWAY])


async def register_voice(request: web.Request) -> web.Response:
    """A multipart upload (voices.py) registered on every ready server."""
    gateway = request.app[GATEWAY]
    upload = await read_upload(request, gateway.decoders, gateway.reference_limits, gateway.config.read_timeout_s)
    if isinstance(upload, ApiError):
        return error_response(gateway, upload)
    answers = await gateway.register_voice(registry_request("register", upload.name, upload, request_id_of(request)))
    result = merged_register(answers) if answers else no_server()
    if isinstance(result, ApiError):
        return error_response(gateway, upload_param(result))
    return web.json_response(result)


async def list_voices(request: web.Request) -> web.Response:
    """Every voice a request may name (listings.py); `?registered=true`: the registered ones alone."""
    gateway = request.app[GATEWAY]
    registered_only = request.query.get("registered")
    if registered_only not in (None, "true", "false"):
        return error_response(gateway, bad_request(f"'registered' must be true or false, got "
                                                   f"{quoted(registered_only)}", param="registered"))
    answers = await gateway.call_voice_registry(registry_request("list", request_id=request_id_of(request)))
    result = merged_list(answers) if answers else no_server()
    if isinstance(result, ApiError):
        return error_response(gateway, result)
    return web.json_response(result if registered_only == "true" else voice_listing(result, answers))


async def audio_models(request: web.Request) -> web.Response:
    """The TTS models, as web UIs list them (`models`) and in OpenAI's list shape (`data`)."""
    return web.json_response(audio_models_json(served_models(request.app[GATEWAY].model_ids)))


async def delete_voice(request: web.Request) -> web.Response:
    gateway = request.app[GATEWAY]
    name = request.match_info["name"]
    answers = await gateway.call_voice_registry(registry_request("delete", name, request_id=request_id_of(request)))
    result = merged_delete(name, answers) if answers else no_server()
    return error_response(gateway, result) if isinstance(result, ApiError) else web.json_response(result)


async def models(request: web.Request) -> web.Response:
    gateway = request.app[GATEWAY]
    return web.json_response({"object": "list", "data": [model_json(m) for m in served_models(gateway.model_ids)]})


async def model(request: web.Request) -> web.Response:
    gateway = request.app[GATEWAY]
    name = request.match_info["model"]
    if name not in served_models(gateway.model_ids):
        return error_response(gateway, model_not_found(name, gateway.model_ids))
    return web.json_response(model_json(name))


async def health(request: web.Request) -> web.Response:
    report = request.app[GATEWAY].health()  # the readiness poll's view: a probe asks no server
    return web.json_response(report, status=200 if report["status"] == "ok" else 503)


async def metrics(request: web.Request) -> web.Response:
    gateway = request.app[GATEWAY]
    live = {b.url: b.num_live for b in gateway.balancer.backends}
    return web.Response(text=gateway.stats.prometheus(live), content_type="text/plain")
