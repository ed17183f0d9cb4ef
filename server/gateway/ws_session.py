"""The messages of `GET /v1/audio/speech/stream` (docs/GATEWAY.md): what a client sends, checked into
typed values, and what the gateway sends back.

Client → gateway, JSON text messages:

    {"type": "session.update", "session": {"voice": "alloy", "seed": 1, ...}}   optional, before any text
    {"type": "input_text.append", "text": "Get the"}                            any number
    {"type": "input_text.done"}                                                 closes the text
    {"type": "input_audio.append", "audio": "<base64 PCM16>"}  audio in, or binary messages (16-bit LE PCM)
    {"type": "input_audio.done"}                                                closes the input audio
    {"type": "response.cancel", "audio_end_ms": 1234}                           barge-in (the key is optional)

Gateway → client: each audio chunk as a binary message (16-bit little-endian mono PCM; with `wav`, the
first starts with a WAV header), and JSON events `{"type": "audio.done", ...}`,
`{"type": "error", "code", "message", "param"}`, with `timestamps` "word" `{"type": "audio.words", "chunk_index",
"words"}` after each chunk's audio, and after a `response.cancel` `{"type": "response.cancelled", ...}` (the
audio time reached and the last word spoken there), after which the socket takes the next utterance. The session fields are `POST /v1/audio/speech`'s
(speech.py checks them, `ref_audio`, `ref_text` and `x_vector_only` among them) but `input` and `stream_format`, plus
`text_idle_timeout_s` and `input_sample_rate`.

Audio in (a model that listens while it speaks: its family's `takes_input_audio`): a session whose
`input_sample_rate` is set streams 16-bit little-endian mono PCM at that rate in, as `input_audio.append` (base64)
or binary messages, and `input_audio.done` closes it; its target speaker is `voice`, a registered voice (the voice
API), or an enrollment sent inline (`ref_audio` with `x_vector_only`). One session is text or audio, never both.
"""
from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, replace
from enum import Enum

import numpy as np

from audio.encoders import ChunkEncoder
from protocol.formats import FORMATS
from server.gateway.errors import ApiError, load_json
from server.gateway.speech import (EXTRA_FIELDS, OPENAI_FIELDS, OUTPUT_FIELDS, PEER_FIELDS, REFERENCE_FIELDS,
                                    GatewaySpeechRequest, check_unicode, extra_params, parse_speech)
from server.gateway.triton_stream import AudioChunk
from protocol.quoting import quoted

SOCKET_FORMATS = ("pcm", "wav")  # 16-bit PCM only: a binary message per chunk, playable as it comes
DEFAULT_FORMAT = "pcm"
SESSION_FIELDS = (*(f for f in OPENAI_FIELDS if f not in ("input", "stream_format")), *OUTPUT_FIELDS, *EXTRA_FIELDS,
                  *(f for f in PEER_FIELDS if f != "stream"), *REFERENCE_FIELDS)  # a session always streams
SESSION_ONLY_FIELDS = {"text_idle_timeout_s": float, "input_sample_rate": int}  # a whole-text request's: none


class ErrorCode(str, Enum):
    """The `code` of an error event the gateway itself decides; the server's codes pass through as they are."""

    INVALID_JSON = "invalid_json"  # a text message that is not JSON
    INVALID_MESSAGE = "invalid_message"  # not an object, no `type`, a wrong or unknown key, a binary message
    UNKNOWN_TYPE = "unknown_type"
    INVALID_VALUE = "invalid_value"  # a session field the gateway refuses (`param` names it)
    SESSION_STARTED = "session_started"  # session.update after the text started: the settings are fixed
    TEXT_CLOSED = "text_closed"  # text after input_text.done
    NO_RESPONSE = "no_response"  # response.cancel with no utterance under way
    MIXED_INPUT = "mixed_input"  # text in an audio-in session, or audio in a text one (or none declared)
    BAD_INPUT = "bad_input"  # the server refused the input and gave no finer code


@dataclass(frozen=True)
class SessionUpdate:
    fields: dict


@dataclass(frozen=True)
class TextAppend:
    text: str


@dataclass(frozen=True)
class TextDone:
    pass


@dataclass(frozen=True)
class ResponseCancel:
    """Barge-in: stop the utterance now. `audio_end_s`: how far the client played it (None: all that was sent)."""

    audio_end_s: float | None = None


@dataclass(frozen=True)
class AudioAppend:
    samples: np.ndarray  # [n] float32 in [-1, 1], at the session's `input_sample_rate`


@dataclass(frozen=True)
class AudioDone:
    pass


ClientMessage = SessionUpdate | TextAppend | TextDone | ResponseCancel | AudioAppend | AudioDone


def pcm16_samples(data: bytes, what: str) -> AudioAppend | SocketError:
    """16-bit little-endian mono PCM -> samples (an odd byte count is refused: half a sample)."""
    if len(data) % 2:
        return SocketError(ErrorCode.INVALID_MESSAGE, f"{what} must be 16-bit PCM: an even number of bytes, got "
                                                      f"{len(data)}", "audio")
    return AudioAppend(np.frombuffer(data, "<i2").astype(np.float32) / 32768.0)


@dataclass(frozen=True)
class SocketError:
    """One error event: a code (an ErrorCode value or the server's), the message, the field at fault."""

    code: str
    message: str
    param: str | None = None

    def to_json(self) -> dict:
        return {"type": "error", "code": self.code, "message": self.message, "param": self.param}


def parse_message(data: str) -> ClientMessage | SocketError:
    """A client's text message, or the first thing wrong with it."""
    try:
        message = load_json(data)
    except ValueError as exc:
        return SocketError(ErrorCode.INVALID_JSON, f"the message is not valid JSON: {exc}")
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        return SocketError(ErrorCode.INVALID_MESSAGE, "a message must be a JSON object with a string 'type'", "type")
    parse = _PARSERS.get(message["type"])
    if parse is None:
        return SocketError(ErrorCode.UNKNOWN_TYPE, f"unknown message type {quoted(message['type'])}; known: "
                                                   f"{', '.join(_PARSERS)}", "type")
    return _check_keys(message) or parse(message)


_KEYS = {"session.update": ("session",), "input_text.append": ("text",), "input_text.done": (),
         "response.cancel": ("audio_end_ms",), "input_audio.append": ("audio",), "input_audio.done": ()}


def _check_keys(message: dict) -> SocketError | None:
    """Unknown keys are refused, not ignored (as the HTTP route refuses unknown fields)."""
    unknown = sorted(set(message) - {"type", *_KEYS[message["type"]]})
    if unknown:
        return SocketError(ErrorCode.INVALID_MESSAGE, f"{message['type']} has no key {quoted(unknown[0])}", unknown[0])
    return None


def _session_update(message: dict) -> SessionUpdate | SocketError:
    if not isinstance(message.get("session"), dict):
        return SocketError(ErrorCode.INVALID_MESSAGE, "session.update needs 'session', a JSON object", "session")
    return SessionUpdate(message["session"])


def _text_append(message: dict) -> TextAppend | SocketError:
    text = message.get("text")
    if not isinstance(text, str):
        return SocketError(ErrorCode.INVALID_MESSAGE, "input_text.append needs 'text', a string", "text")
    error = check_unicode(text, "text")
    return from_api_error(error, ErrorCode.INVALID_VALUE) if error else TextAppend(text)


def _response_cancel(message: dict) -> ResponseCancel | SocketError:
    end_ms = message.get("audio_end_ms")
    if end_ms is None:
        return ResponseCancel()
    if isinstance(end_ms, bool) or not isinstance(end_ms, (int, float)) or not 0 <= end_ms < float("inf"):
        return SocketError(ErrorCode.INVALID_MESSAGE, "response.cancel's 'audio_end_ms' must be a number >= 0 (how "
                                                      "many ms of the utterance the client played)", "audio_end_ms")
    return ResponseCancel(end_ms / 1000)


def _audio_append(message: dict) -> AudioAppend | SocketError:
    audio = message.get("audio")
    if not isinstance(audio, str):
        return SocketError(ErrorCode.INVALID_MESSAGE, "input_audio.append needs 'audio', base64 16-bit PCM", "audio")
    try:
        data = base64.b64decode(audio, validate=True)
    except (binascii.Error, ValueError):
        return SocketError(ErrorCode.INVALID_MESSAGE, "input_audio.append's 'audio' is not valid base64", "audio")
    return pcm16_samples(data, "input_audio.append's 'audio'")


_PARSERS = {"session.update": _session_update, "input_text.append": _text_append,
            "input_text.done": lambda message: TextDone(), "response.cancel": _response_cancel,
            "input_audio.append": _audio_append, "input_audio.done": lambda message: AudioDone()}


def default_session(model_ids: tuple[str, ...]) -> GatewaySpeechRequest:
    """A session's settings before any session.update: the served model, its default voice, pcm (at OpenAI's rate)."""
    return parse_session({}, model_ids)


def parse_session(fields: dict, model_ids: tuple[str, ...]) -> GatewaySpeechRequest | SocketError:
    """A session's settings from all the fields its updates set, or the first one that is wrong."""
    unknown = sorted(set(fields) - set(SESSION_FIELDS) - set(SESSION_ONLY_FIELDS))
    if unknown:
        return SocketError(ErrorCode.INVALID_VALUE, f"unknown session field {quoted(unknown[0])}; known: "
                                                    f"{', '.join((*SESSION_FIELDS, *SESSION_ONLY_FIELDS))}", unknown[0])
    fmt = fields.get("response_format", DEFAULT_FORMAT)
    if fmt not in SOCKET_FORMATS:
        return SocketError(ErrorCode.INVALID_VALUE, f"response_format must be one of {', '.join(SOCKET_FORMATS)} "
                                                    f"on this route, got {quoted(fmt)}", "response_format")
    body = {"model": model_ids[0], "response_format": DEFAULT_FORMAT, "input": "",
            **{name: value for name, value in fields.items() if name not in SESSION_ONLY_FIELDS}}
    request, session_params = parse_speech(body, model_ids), extra_params(fields, SESSION_ONLY_FIELDS)
    for parsed in (request, session_params):
        if isinstance(parsed, ApiError):
            return from_api_error(parsed, ErrorCode.INVALID_VALUE)
    return replace(request, params={**request.params, **session_params})


# The server's refusal of a session that names no voice to speak in (a Base model's, an audio-in session's target
# speaker) speaks of its Triton inputs; a socket's client sets session fields
MISSING_VOICE = "missing_ref_audio"
MISSING_VOICE_MESSAGE = ("this session needs a voice to speak in (an audio-in session: the target speaker's "
                         "enrollment): set with session.update 'voice', a registered voice, or 'ref_audio', the base64 "
                         "of a WAV, FLAC or Ogg file, with 'x_vector_only': true (or 'ref_text', its transcript, where "
                         "the model clones in context)")


def from_api_error(error: ApiError, fallback: ErrorCode) -> SocketError:
    """An error the gateway shares with the HTTP route, as an event (`fallback` where it has no code)."""
    param = "text" if error.param == "input" else error.param  # the HTTP route's `input` is this route's `text`
    message = MISSING_VOICE_MESSAGE if error.code == MISSING_VOICE else error.message
    return SocketError(error.code or fallback, message, param)


def audio_done(audio_seconds: float, num_chunks: int, sample_rate: int | None) -> dict:
    """The end of a session's audio: seconds sent, Triton chunks relayed, the rate (None: no audio came)."""
    return {"type": "audio.done", "audio_seconds": round(audio_seconds, 6), "num_chunks": num_chunks,
            "sample_rate": sample_rate}


def words_event(chunk: AudioChunk) -> dict:
    """The words a chunk speaks (`timestamps` "word"), sent after its audio."""
    return {"type": "audio.words", "chunk_index": chunk.index, "words": chunk.words}


def cancelled_event(audio_seconds: float, words: list[dict], audio_end_s: float | None) -> dict:
    """The answer to a barge-in: the audio time reached (what the client played, else what was sent) and the
    words spoken by then (a word counts once it has started)."""
    reached = audio_seconds if audio_end_s is None else min(audio_end_s, audio_seconds)
    spoken = [w for w in words if w["start"] < reached]
    return {"type": "response.cancelled", "audio_seconds": round(reached, 6),
            "audio_sent_seconds": round(audio_seconds, 6), "last_word": spoken[-1]["word"] if spoken else None,
            "words_spoken": len(spoken)}


class AudioMessages:
    """A session's audio as binary messages: 16-bit PCM per chunk (soxr-resampled to `sample_rate` if asked),
    the WAV header before the first with `wav`."""

    def __init__(self, request: GatewaySpeechRequest) -> None:
        self._format, self._rate = FORMATS[request.response_format], request.sample_rate
        self._encoder: ChunkEncoder | None = None  # made at the first chunk, which says the model's rate
        self.num_samples = 0  # at the model's rate
        self.num_chunks = 0
        self.source_rate: int | None = None
        self.words: list[dict] = []  # every word the chunks so far spoke

    @property
    def seconds(self) -> float:
        """Audio sent so far."""
        return self.num_samples / self.source_rate if self.source_rate else 0.0

    def encode(self, chunk: AudioChunk) -> bytes:
        if self._encoder is None:
            self._encoder = ChunkEncoder(self._format, chunk.sample_rate, self._rate)
            self.source_rate = chunk.sample_rate
        self.num_samples += chunk.audio.size
        self.num_chunks += 1
        self.words.extend(chunk.words or ())
        return self._encoder.encode(np.asarray(chunk.audio, np.float32))

    def finish(self) -> bytes:
        """What the resampler held back (nothing at the model's own rate); nothing if no audio came."""
        return self._encoder.finish() if self._encoder is not None else b""

    def done(self) -> dict:
        return audio_done(self.seconds, self.num_chunks, self._encoder.rate if self._encoder else None)
