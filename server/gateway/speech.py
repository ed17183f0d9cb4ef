"""`POST /v1/audio/speech` bodies: OpenAI's fields plus VoxLane's sampling fields, checked at the door."""
from __future__ import annotations

import base64
import binascii
import math
from dataclasses import dataclass, field

from audio.decoding import AudioFileError, decode_reference
from protocol.reference import ReferenceLimits
from protocol.formats import FORMATS, SAMPLE_RATES
from server.gateway.errors import ApiError, bad_request
from protocol.quoting import quoted
from protocol.tensors import REQUEST_INPUTS, TIMESTAMP_KINDS, TIMESTAMPS_NONE, TIMESTAMPS_WORD, fits_integer

RESPONSE_FORMATS = tuple(FORMATS)  # OpenAI's formats: wav, pcm, mp3, opus, aac, flac
DEFAULT_RESPONSE_FORMAT = "mp3"  # OpenAI's: apps that name no format store the reply as .mp3
# OpenAI's `pcm` is 24 kHz mono 16-bit, and players take it at that rate without a header to read: `pcm` comes at
# this rate from every family unless `sample_rate` asks for another (resampled as `sample_rate` is); a format with
# a header (wav, flac, mp3, ...) says its rate and keeps the model's
OPENAI_PCM_RATE = 24000
HEADERLESS_FORMATS = ("pcm",)
STREAM_FORMATS = ("audio", "sse")
# OpenAI's built-in voices: the model's default voice, so unchanged OpenAI client code runs
OPENAI_VOICES = ("alloy", "ash", "ballad", "coral", "echo", "fable", "onyx", "nova", "sage", "shimmer",
                 "verse", "marin", "cedar")
OPENAI_MODELS = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")
# VoxLane's own request fields (the router's optional inputs), by JSON type (their tensors')
EXTRA_FIELDS = {name: REQUEST_INPUTS[name].json_type for name in ("seed", "temperature", "top_p", "top_k",
                                                                   "repetition_penalty", "max_audio_seconds",
                                                                   "ignore_eos")}
OPENAI_FIELDS = ("model", "input", "voice", "response_format", "speed", "stream_format", "instructions")
# VoxLane's: the rate of the audio sent (default: the model's, OPENAI_PCM_RATE for `pcm`); `timestamps` "word": each
# chunk's words with their start and end (SSE events, WebSocket messages)
OUTPUT_FIELDS = ("sample_rate", "timestamps")
_SPEED = REQUEST_INPUTS["speed"]
SPEED_RANGE = (_SPEED.low, _SPEED.high)  # OpenAI's, and the router's
# the peers' (vLLM-Omni's and SGLang-Omni's speech APIs; docs/GATEWAY.md has the table): `stream` false sends the
# whole file in one response; `language` and `non_streaming_mode` are the router's inputs of those names
PEER_FIELDS = ("stream", "language", "non_streaming_mode")
# VoxLane's: a voice to clone, inline (a registered voice is a `voice`): `ref_audio` the base64 of a WAV, FLAC or
# Ogg file, `ref_text` its transcript, `x_vector_only` the speaker embedding alone. Whole-text requests only
REFERENCE_FIELDS = ("ref_audio", "ref_text", "x_vector_only")


@dataclass(frozen=True)
class GatewaySpeechRequest:
    """One checked speech request of the gateway (a `POST /v1/audio/speech` body, or a WebSocket session's
    settings): what it asks Triton for. `params` are the Triton inputs beside `text` and `voice`; the router parses
    them into its own SpeechRequest (stub_common/request_inputs.py)."""

    model: str
    text: str
    voice: str | None  # None: the model's default voice
    response_format: str = DEFAULT_RESPONSE_FORMAT
    stream_format: str = "audio"
    params: dict = field(default_factory=dict)
    sample_rate: int | None = None  # None: the model's own rate (output_rate says when)
    is_streamed: bool = True  # False (`stream`: false): the whole file in one response, its length known
    request_id: str | None = None  # Triton's request id of its stream (request_ids.py); None: a fresh one

    @property
    def word_timestamps(self) -> bool:
        return self.params.get("timestamps") == TIMESTAMPS_WORD


def parse_speech(body: object, model_ids: tuple[str, ...],
                 limits: ReferenceLimits = ReferenceLimits()) -> GatewaySpeechRequest | ApiError:
    """The request, or the first thing wrong with it (OpenAI's error shape); `limits`: the server's on a reference."""
    if not isinstance(body, dict):
        return bad_request("the request body must be a JSON object")
    unknown = sorted(set(body) - set(OPENAI_FIELDS) - set(EXTRA_FIELDS) - set(OUTPUT_FIELDS) - set(REFERENCE_FIELDS)
                     - set(PEER_FIELDS))
    if unknown:
        return bad_request(f"unrecognized request argument supplied: {quoted(unknown[0])}", param=unknown[0])
    checks = (_check_model(body, model_ids), _check_input(body), _check_formats(body), _check_sample_rate(body),
              _check_unsupported(body), _check_stream(body))
    for error in checks:
        if error is not None:
            return error
    voice = _voice(body.get("voice"))
    if isinstance(voice, ApiError):
        return voice
    params = _params(body, limits)
    if isinstance(params, ApiError):
        return params
    fmt = body.get("response_format", DEFAULT_RESPONSE_FORMAT)
    return GatewaySpeechRequest(body["model"], body["input"], voice, fmt, body.get("stream_format", "audio"), params,
                         output_rate(fmt, body.get("sample_rate")), body.get("stream") is not False)


def output_rate(response_format: str, sample_rate: int | float | None) -> int | None:
    """The rate of the audio sent (None: the model's own): `sample_rate` if given (JSON's 16000.0 is 16000, as the
    encoders and the X-Sample-Rate header need), else OPENAI_PCM_RATE for headerless audio."""
    if sample_rate is not None:
        return int(sample_rate)
    return OPENAI_PCM_RATE if response_format in HEADERLESS_FORMATS else None


def _params(body: dict, limits: ReferenceLimits) -> dict | ApiError:
    """The router's inputs beside `text` and `voice`: sampling, prompt options, the voice to clone."""
    params = extra_params(body)
    if isinstance(params, ApiError):
        return params
    prompt = prompt_params(body)
    if isinstance(prompt, ApiError):
        return prompt
    reference = reference_params(body, limits)
    if isinstance(reference, ApiError):
        return reference
    return {**params, **prompt, **reference, **_output_params(body)}


def _output_params(body: dict) -> dict:
    """`speed` (other than 1) and `timestamps` ("word") as the router's inputs; checked before."""
    params = {}
    if body.get("speed", _SPEED.default) != _SPEED.default:
        params["speed"] = float(body["speed"])
    if body.get("timestamps", TIMESTAMPS_NONE) == TIMESTAMPS_WORD:
        params["timestamps"] = TIMESTAMPS_WORD
    return params


def prompt_params(body: dict) -> dict | ApiError:
    """`language`, `instructions` (non-empty) and `non_streaming_mode` as the router's inputs; which values the
    model takes is the server's to say (a 400 naming the field, with the allowed values)."""
    params = {}
    for name in ("language", "instructions"):
        value = body.get(name)
        if value is None:
            continue
        if not isinstance(value, str):
            return bad_request(f"'{name}' must be a string, got {quoted(value)}", param=name)
        if (error := check_unicode(value, name)) is not None:
            return error
        if value.strip():
            params[name] = value
    flags = extra_params(body, {"non_streaming_mode": bool})
    return flags if isinstance(flags, ApiError) else {**params, **flags}


def _check_model(body: dict, model_ids: tuple[str, ...]) -> ApiError | None:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        return bad_request("'model' is required (a string)", param="model")
    if model not in served_models(model_ids):
        return model_not_found(model, model_ids)
    return None


def served_models(model_ids: tuple[str, ...]) -> tuple[str, ...]:
    """The model names a request may give: the served model's own and OpenAI's TTS models (its aliases)."""
    return model_ids + tuple(m for m in OPENAI_MODELS if m not in model_ids)


def model_not_found(model: str, model_ids: tuple[str, ...]) -> ApiError:
    return ApiError(404, f"the model {quoted(model)} does not exist; this server has "
                         f"{', '.join(served_models(model_ids))}", param="model", code="model_not_found")


def _check_input(body: dict) -> ApiError | None:
    if not isinstance(body.get("input"), str):
        return bad_request("'input' is required (the text to speak)", param="input")
    return check_unicode(body["input"], "input")  # length and content are the server's to judge


def check_unicode(text: str, param: str) -> ApiError | None:
    """JSON can spell a lone surrogate ("\\ud800"), which no UTF-8 request can carry."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return bad_request(f"'{param}' is not valid Unicode: lone surrogate U+{ord(text[exc.start]):04X} "
                           f"at character {exc.start}", param=param)
    return None


def _check_one_of(body: dict, key: str, default: str, choices: tuple[str, ...]) -> ApiError | None:
    """`body[key]` (absent: `default`) is one of `choices`, or a 400 that names them."""
    value = body.get(key, default)
    if value not in choices:
        return bad_request(f"{key} must be one of {', '.join(choices)}, got {quoted(value)}", param=key)
    return None


def _check_formats(body: dict) -> ApiError | None:
    return (_check_one_of(body, "response_format", DEFAULT_RESPONSE_FORMAT, RESPONSE_FORMATS)
            or _check_one_of(body, "stream_format", "audio", STREAM_FORMATS))


def _check_sample_rate(body: dict) -> ApiError | None:
    rate = body.get("sample_rate")
    if rate is None:
        return None
    if isinstance(rate, bool) or rate not in SAMPLE_RATES:
        return bad_request(f"sample_rate must be one of {', '.join(map(str, SAMPLE_RATES))}, got {quoted(rate)}",
                           param="sample_rate")
    fmt = FORMATS.get(body.get("response_format", DEFAULT_RESPONSE_FORMAT))
    if fmt is not None and rate not in fmt.sample_rates:
        return bad_request(f"response_format '{fmt.name}' carries sample_rate "
                           f"{', '.join(map(str, fmt.sample_rates))} only, got {rate}",
                           param="sample_rate", code="unsupported_value")
    return None


def _check_unsupported(body: dict) -> ApiError | None:
    """`speed` in OpenAI's range (time-stretched on the server, pitch kept); `timestamps` "word" or "none"."""
    speed, (low, high) = body.get("speed", _SPEED.default), SPEED_RANGE
    if isinstance(speed, bool) or not isinstance(speed, (int, float)) or not low <= speed <= high:
        return bad_request(f"speed must be a number from {low:g} to {high:g}, got {quoted(speed)}", param="speed")
    return _check_one_of(body, "timestamps", TIMESTAMPS_NONE, TIMESTAMP_KINDS)


def _check_stream(body: dict) -> ApiError | None:
    """`stream`: true or false; false with `stream_format` "sse" asks for two things at once."""
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        return bad_request(f"'stream' must be true or false, got {quoted(stream)}", param="stream")
    if stream is False and body.get("stream_format") == "sse":
        return bad_request("stream_format 'sse' streams events; with 'stream': false the whole file comes in one "
                           "response: send one of them", param="stream_format", code="unsupported_value")
    return None


def _voice(voice: object) -> str | None | ApiError:
    if isinstance(voice, dict):  # OpenAI's custom-voice form: {"id": "..."}
        voice = voice.get("id")
    if voice is None or voice in OPENAI_VOICES:
        return None
    if not isinstance(voice, str) or not voice:
        return bad_request("'voice' must be a voice name or {\"id\": name}", param="voice")
    return check_unicode(voice, "voice") or voice


def reference_params(body: dict, limits: ReferenceLimits = ReferenceLimits()) -> dict | ApiError:
    """The router's reference inputs from `ref_audio` (decoded here: samples and their rate), `ref_text` and
    `x_vector_only`; the server checks the rest (length, level, a transcript for in-context cloning)."""
    params = {}
    if body.get("ref_audio") is not None:
        audio = decode_audio_field(body["ref_audio"], limits)
        if isinstance(audio, ApiError):
            return audio
        params.update(ref_audio=audio.samples, ref_sample_rate=audio.sample_rate)
    text = body.get("ref_text")
    if text is not None:
        if not isinstance(text, str):
            return bad_request(f"'ref_text' must be a string, got {quoted(text)}", param="ref_text")
        if (error := check_unicode(text, "ref_text")) is not None:
            return error
        params["ref_text"] = text
    flags = extra_params(body, {"x_vector_only": bool})
    return flags if isinstance(flags, ApiError) else {**params, **flags}


def decode_audio_field(value: object, limits: ReferenceLimits = ReferenceLimits()):
    """`ref_audio`: the base64 of a WAV, FLAC or Ogg file (a `data:audio/...;base64,` URL too), decoded."""
    if not isinstance(value, str):
        return bad_request("'ref_audio' must be a string: the base64 of a WAV, FLAC or Ogg file", param="ref_audio")
    if value.startswith("data:") and ";base64," in value:
        value = value.split(";base64,", 1)[1]
    try:
        data = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return bad_request("'ref_audio' is not valid base64", param="ref_audio", code="invalid_base64")
    try:
        return decode_reference(data, limits)
    except AudioFileError as exc:
        return bad_request(f"'ref_audio': {exc}", param="ref_audio", code=exc.code)


def extra_params(body: dict, fields: dict[str, type] = EXTRA_FIELDS) -> dict | ApiError:
    """The router inputs among `body`'s `fields` (name → JSON type), typed; or the first one that is wrong."""
    params = {}
    for name, kind in fields.items():
        if name not in body or body[name] is None:
            continue
        value = _typed(body[name], kind)
        if value is None:
            return bad_request(f"'{name}' must be {_KIND_NAMES[kind]}, got {quoted(body[name])}", param=name)
        if kind is int and not fits_integer(name, value):  # never wrapped into the tensor's dtype
            return bad_request(f"'{name}' is out of range: {quoted(value)} does not fit its "
                               f"{REQUEST_INPUTS[name].triton_type} input", param=name)
        params[name] = value
    return params


_KIND_NAMES = {int: "an integer", float: "a finite number", bool: "true or false"}


def _typed(value: object, kind: type) -> object | None:
    if kind is bool:
        return value if isinstance(value, bool) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if kind is int:
        return value if isinstance(value, int) else None
    return float(value) if math.isfinite(value) else None
