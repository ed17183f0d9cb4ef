"""`GET /v1/audio/speech/stream`: one WebSocket, one streaming-text session, or one audio-in session (ws_session.py
has the messages).

Two tasks share the socket: the handler reads the client's messages and passes its text on
(`SessionText`); from the first `input_text.append` (or `input_text.done`) a relay task writes the
session's audio and events back. A bad message gets an error event and changes nothing. The session
ends with `audio.done` or an error event, after which the gateway closes the socket; a client that
closes it first cancels the Triton stream, which frees its LM slot.

Barge-in: `response.cancel` cancels the utterance's Triton stream at once (the router frees its LM row and
decodes nothing more for it), answers `response.cancelled` with the audio time reached and the last word
spoken there, and keeps the socket: the next `input_text.append` starts the next utterance with the same
settings (a `session.update` may change them first). The gateway always asks the server for the words
(`timestamps` "word") so that it can answer; it sends them on only to a session that asked for them.
"""
from __future__ import annotations

import asyncio
import logging
import time
from contextlib import aclosing
from dataclasses import replace
from enum import Enum

from aiohttp import WSMsgType, web

from server.gateway.request_ids import request_id_of
from server.gateway.service import Gateway
from server.gateway.speech import GatewaySpeechRequest
from server.gateway.triton_session import PieceRefused, SessionText
from server.gateway.triton_stream import StreamFailure
from server.gateway.ws_session import (AudioAppend, AudioDone, AudioMessages, ErrorCode, ResponseCancel,
                                        SessionUpdate, SocketError, TextAppend, TextDone, cancelled_event,
                                        default_session, from_api_error, parse_message, parse_session, pcm16_samples,
                                        words_event)

log = logging.getLogger("voxlane.gateway")
MAX_MESSAGE_BYTES = 1 << 20  # as the HTTP route's body limit; aiohttp closes the socket (1009) on a larger one


class Phase(Enum):
    SETUP = "setup"  # no text yet: session.update may change the settings
    TEXT = "text"  # the text is coming: the Triton session is open
    TEXT_CLOSED = "text_closed"  # input_text.done came: the audio goes on to its end


async def serve_socket(request: web.Request, gateway: Gateway) -> web.WebSocketResponse:
    # no permessage-deflate: 16-bit PCM hardly compresses, and deflating every chunk costs CPU
    socket = web.WebSocketResponse(compress=False, max_msg_size=MAX_MESSAGE_BYTES)
    await socket.prepare(request)
    await SpeechSocket(request, socket, gateway).run()
    return socket


class SpeechSocket:
    def __init__(self, request: web.Request, socket: web.WebSocketResponse, gateway: Gateway) -> None:
        self.request, self.socket, self.gateway = request, socket, gateway
        self.fields: dict = {}  # every field the session's updates set
        self.speech = default_session(gateway.model_ids)
        self.text = SessionText()
        self.phase = Phase.SETUP
        self._relay: asyncio.Task | None = None
        self._audio: AudioMessages | None = None  # the current utterance's audio, as sent
        self._is_stream_over = False  # the relay has the session's end: closing the socket cancels nothing

    async def run(self) -> None:
        """Read the client's messages until the socket closes (the client's close, or the gateway's after the end)."""
        try:
            async for message in self.socket:
                await self._on_message(message)
        finally:
            await self._stop_relay()

    async def _on_message(self, message) -> None:
        if message.type is WSMsgType.ERROR:
            return  # the socket is broken: the next read ends the loop
        if message.type is WSMsgType.BINARY:  # input audio, as 16-bit PCM
            if not self.is_audio_in:
                await self._send_error(SocketError(ErrorCode.INVALID_MESSAGE, "binary messages are input audio: set "
                                                   "'input_sample_rate' with session.update first", "audio"))
                return
            parsed = pcm16_samples(message.data, "a binary message")
        elif message.type is not WSMsgType.TEXT:
            return
        else:
            parsed = parse_message(message.data)
        if isinstance(parsed, ResponseCancel):
            await self._barge_in(parsed)
            return
        if isinstance(parsed, SessionUpdate):
            error = await self._update(parsed.fields)
        else:
            error = parsed if isinstance(parsed, SocketError) else self._take(parsed)
        if error is not None:
            await self._send_error(error)

    async def _barge_in(self, cancel: ResponseCancel) -> None:
        """Stop the utterance under way, say how far it got, and make the socket ready for the next one."""
        if self._relay is None or self._is_stream_over:
            await self._send_error(SocketError(ErrorCode.NO_RESPONSE, "no utterance is under way: nothing to cancel"))
            return
        relay, audio = self._relay, self._audio
        relay.cancel()  # closes the Triton stream: the server cancels the LM request and frees its row
        await asyncio.wait([relay])
        self._relay, self._audio, self.text, self.phase = None, None, SessionText(), Phase.SETUP
        await self._send_json(cancelled_event(audio.seconds, audio.words, cancel.audio_end_s))

    @property
    def is_audio_in(self) -> bool:
        """The session streams input audio (its `input_sample_rate` is set), not text."""
        return "input_sample_rate" in self.speech.params

    def _take(self, message) -> SocketError | None:
        is_audio = isinstance(message, (AudioAppend, AudioDone))
        if is_audio != self.is_audio_in:
            return SocketError(ErrorCode.MIXED_INPUT, "this session streams input audio ('input_sample_rate' is set): "
                               "send input_audio.* messages" if self.is_audio_in else "this session streams text: "
                               "send input_text.* messages, or set 'input_sample_rate' before any input to stream "
                               "audio in", "type")
        if self.phase is Phase.TEXT_CLOSED:
            return SocketError(ErrorCode.TEXT_CLOSED, "the input is closed (its done message came); nothing more "
                                                      "can be added to this session")
        if self.phase is Phase.SETUP:
            self._open()
        if isinstance(message, (TextAppend, AudioAppend)):
            self.text.append(message.text if isinstance(message, TextAppend) else message.samples)
        else:
            self.text.close()
            self.phase = Phase.TEXT_CLOSED
        return None

    async def _update(self, fields: dict) -> SocketError | None:
        """Set the given fields (the others keep their values); a bad update changes nothing."""
        if self.phase is not Phase.SETUP:
            return SocketError(ErrorCode.SESSION_STARTED, "session.update must come before the first "
                                                          "input_text.append: the session's settings are fixed")
        merged = {**self.fields, **fields}
        parsed = await self._parse(merged)
        if isinstance(parsed, SocketError):
            return parsed
        self.fields, self.speech = merged, parsed
        return None

    async def _parse(self, fields: dict) -> GatewaySpeechRequest | SocketError:
        """`parse_session`; an enrollment inline (`ref_audio`) is decoded off the event loop, as the HTTP route's."""
        if fields.get("ref_audio") is None:
            return parse_session(fields, self.gateway.model_ids)
        async with self.gateway.decoders:
            return await asyncio.to_thread(parse_session, fields, self.gateway.model_ids)

    def _open(self) -> None:
        self.phase = Phase.TEXT
        self.text.is_audio = self.is_audio_in
        self.gateway.stats.num_streams += 1
        self._audio = AudioMessages(self.speech)
        self._relay = asyncio.create_task(self._relay_session(self._audio), name="voxlane-speech-socket")

    async def _relay_session(self, audio: AudioMessages) -> None:
        try:
            await self._relay_to_client(audio)
        except ClientTooSlow as exc:  # drop it: leaving `_relay_events` cancelled the Triton stream
            log.warning("dropped a WebSocket client: %s", exc)
            if self.request.transport is not None:
                self.request.transport.abort()
        except ConnectionResetError:  # the client left while a message was written: its close ends the read loop
            pass

    async def _relay_to_client(self, audio: AudioMessages) -> None:
        """Write the session's audio and events to the socket, then close it."""
        try:
            await self._relay_events(audio)
        except StreamFailure as exc:
            self._is_stream_over = True
            self.gateway.stats.num_errors[exc.error.status] += 1
            await self._send_error(from_api_error(exc.error, ErrorCode.BAD_INPUT))
        await self.socket.close()

    async def _relay_events(self, audio: AudioMessages) -> None:
        with_words = replace(self.speech, params={**self.speech.params, "timestamps": "word"},  # for a barge-in
                             request_id=request_id_of(self.request))  # each utterance a Triton id of its own
        async with aclosing(self.gateway.speak_text(with_words, self.text)) as events:
            async for event in events:
                if isinstance(event, PieceRefused):
                    await self._send_error(from_api_error(event.error, ErrorCode.BAD_INPUT))
                    continue
                await self._send_audio(audio.encode(event))
                if self.speech.word_timestamps:
                    await self._send_json(words_event(event))
                self.gateway.stats.on_chunk_written(time.perf_counter() - event.arrived_s)
        self._is_stream_over = True
        await self._send_audio(audio.finish())
        await self._send_json(audio.done())

    async def _send_audio(self, data: bytes) -> None:
        if not data:
            return
        timeout_s = self.gateway.config.write_timeout_s
        try:  # returns once the socket has taken the bytes: a client that reads nothing stalls it
            await asyncio.wait_for(self.socket.send_bytes(data), timeout_s)
        except asyncio.TimeoutError:
            raise ClientTooSlow(f"it took no bytes for {timeout_s:g} s (the gateway's write timeout)") from None

    async def _send_error(self, error: SocketError) -> None:
        await self._send_json(error.to_json())

    async def _send_json(self, event: dict) -> None:
        if not self.socket.closed:  # a client that has gone needs no event; its close ends the session
            await self.socket.send_json(event)

    async def _stop_relay(self) -> None:
        """Cancel the session if the client left before its end; else let the relay finish its close."""
        if self._relay is None:
            return
        if not self._is_stream_over:
            self._relay.cancel()
        await asyncio.wait([self._relay])
        if not self._relay.cancelled() and self._relay.exception() is not None:
            log.error("a WebSocket session failed", exc_info=self._relay.exception())


class ClientTooSlow(Exception):
    """The WebSocket client stopped taking the session's bytes."""
