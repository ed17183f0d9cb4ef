"""Registered voices through the gateway: `POST /v1/audio/voices` (a multipart upload), `GET /v1/audio/voices`,
`DELETE /v1/audio/voices/{name}`, each a call to every ready server's `voice_registry` (docs/STREAMING.md, "Voice registry").

A voice is registered on every server the gateway fronts, so whichever server takes a stream has it (servers on
one host may also share one data directory: the second answers the voice the first stored). A register is
idempotent (the same file and name again answer the stored voice), so a 503 from one server can be retried as a
whole. The upload is decoded here (WAV, FLAC or Ogg, with PyAV); its samples go to the servers as `ref_audio`.
"""
from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np
from aiohttp import BodyPartReader, web
from tritonclient.grpc import service_pb2

from audio.decoding import AudioFileError, DecodedAudio, decode_reference
from protocol.errors import RequestError
from protocol.reference import ReferenceLimits
from protocol.voices import check_name
from server.gateway.errors import ApiError, bad_request, request_timeout, unavailable
from server.gateway.speech import OPENAI_VOICES, check_unicode
from server.gateway.triton_stream import add_input, add_tensor
from protocol.models import VOICE_REGISTRY
from protocol.quoting import quoted

log = logging.getLogger("voxlane.gateway")
REFERENCE_UNSUPPORTED = "reference_unsupported"  # a server's code: its model clones no voice
MAX_UPLOAD_BYTES = 16 << 20  # a 60 s reference as 16-bit WAV at 48 kHz is 5.8 MB
UPLOAD_FIELDS = ("file", "name", "transcript", "ref_text", "x_vector_only")  # `ref_text` as on /v1/audio/speech
# the server's input names as the upload spells them
UPLOAD_PARAMS = {"ref_audio": "file", "ref_sample_rate": "file", "ref_text": "transcript"}


@dataclass(frozen=True)
class VoiceUpload:
    name: str
    audio: DecodedAudio
    transcript: str | None
    x_vector_only: bool | None


async def read_upload(request: web.Request, decoders: asyncio.Semaphore, limits: ReferenceLimits = ReferenceLimits(),
                      read_timeout_s: float | None = None) -> VoiceUpload | ApiError:
    """The multipart form of `POST /v1/audio/voices`, read within `read_timeout_s` (else a 408) and decoded within
    `limits` (the server's); or the first thing wrong with it."""
    if not request.content_type.startswith("multipart/"):
        return bad_request("send the voice as multipart/form-data: 'file' (WAV, FLAC or Ogg), 'name', and "
                           "optionally 'transcript' and 'x_vector_only'", param="file")
    try:
        fields = await asyncio.wait_for(_read_fields(await request.multipart()), read_timeout_s)
    except asyncio.TimeoutError:
        return request_timeout(read_timeout_s)
    except (ValueError, AssertionError) as exc:  # aiohttp: no boundary, a part cut off before its closing one
        return bad_request(f"the multipart body is malformed: {exc or type(exc).__name__}", param="file",
                           code="invalid_multipart")
    if isinstance(fields, ApiError):
        return fields
    for required in ("file", "name"):
        if not fields.get(required):
            return bad_request(f"'{required}' is required", param=required)
    name = _name(fields["name"].decode("utf-8", "replace"))
    transcript = _transcript(fields)
    x_vector_only = _flag(fields.get("x_vector_only"))
    for checked in (name, transcript, x_vector_only):
        if isinstance(checked, ApiError):
            return checked
    try:
        async with decoders:  # off the event loop, a bounded number at once (Gateway.decoders)
            audio = await asyncio.to_thread(decode_reference, fields["file"], limits)
    except AudioFileError as exc:
        return bad_request(f"'file': {exc}", param="file", code=exc.code)
    return VoiceUpload(name, audio, transcript, x_vector_only)


async def _read_fields(reader) -> dict[str, bytes] | ApiError:
    fields, size = {}, 0
    while (part := await reader.next()) is not None:
        if not isinstance(part, BodyPartReader) or part.name not in UPLOAD_FIELDS:
            return bad_request(f"unrecognized form field {quoted(getattr(part, 'name', None))}; the fields are "
                               f"{', '.join(UPLOAD_FIELDS)}", param=getattr(part, "name", None))
        data = bytearray()
        while chunk := await part.read_chunk():
            size += len(chunk)
            if size > MAX_UPLOAD_BYTES:
                return ApiError(413, f"the upload is larger than the limit of {MAX_UPLOAD_BYTES} bytes",
                                param="file", code="request_entity_too_large")
            data += chunk
        fields[part.name] = bytes(data)
    return fields


def _name(name: str) -> str | ApiError:
    if name in OPENAI_VOICES:  # the gateway reads these as the model's default voice
        return bad_request(f"voice name {quoted(name)} is one of OpenAI's voice names, which this gateway reads as "
                           "the model's default voice: choose another", param="name", code="reserved_voice_name")
    try:
        return check_name(name)
    except RequestError as exc:
        return bad_request(str(exc), param="name", code=exc.code)


def _transcript(fields: dict[str, bytes]) -> str | None | ApiError:
    raw = fields.get("transcript", fields.get("ref_text"))
    if raw is None:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return bad_request(f"'transcript' is not valid UTF-8 (byte {exc.start})", param="transcript")
    return check_unicode(text, "transcript") or text


def _flag(raw: bytes | None) -> bool | None | ApiError:
    if raw is None:
        return None
    value = raw.decode("utf-8", "replace").strip().lower()
    if value not in ("true", "false", "1", "0"):
        return bad_request(f"'x_vector_only' must be true or false, got {quoted(value)}", param="x_vector_only")
    return value in ("true", "1")


def registry_request(action: str, name: str | None = None, upload: VoiceUpload | None = None,
                     request_id: str = "") -> service_pb2.ModelInferRequest:
    """A `voice_registry` request: `action`, `name`, and for register the reference inputs of the upload; its
    Triton request id the HTTP request's (request_ids.py), none for the gateway's own calls."""
    proto = service_pb2.ModelInferRequest(model_name=VOICE_REGISTRY, id=request_id)
    for key, value in (("action", action), ("name", name)):
        if value is not None:
            add_tensor(proto, key, "BYTES", np.array([value.encode("utf-8")], dtype=np.object_))
    if upload is not None:
        add_input(proto, "ref_audio", upload.audio.samples)
        add_input(proto, "ref_sample_rate", upload.audio.sample_rate)
        if upload.transcript is not None:
            add_input(proto, "ref_text", upload.transcript)
        if upload.x_vector_only is not None:
            add_input(proto, "x_vector_only", upload.x_vector_only)
    return proto


def import_request(name: str, voice_file: bytes) -> service_pb2.ModelInferRequest:
    """A `voice_registry` import of a voice's file (as another server's export answered it)."""
    proto = registry_request("import", name)
    add_tensor(proto, "voice_file", "BYTES", np.array([voice_file], dtype=np.object_))
    return proto


RegistryCall = Callable[[object, service_pb2.ModelInferRequest], Awaitable["dict | ApiError"]]


async def copy_missing_voices(call: RegistryCall, target, sources: list) -> list[str]:
    """Give the server `target` every voice the `sources` have and it lacks, each copied as it is (export, then
    import: no encoding); the names copied. Voices only `target` has stay there: one deleted while it was away
    must not come back to the others. A server that fails a call is skipped (the next sync tries again)."""
    own = await call(target, registry_request("list"))
    if isinstance(own, ApiError):
        return []
    have, copied = {v["name"] for v in own["data"]}, []
    for source in sources:
        listed = await call(source, registry_request("list"))
        for voice in [] if isinstance(listed, ApiError) else listed["data"]:
            name = voice["name"]
            if name in have or "damaged" in voice:
                continue
            exported = await call(source, registry_request("export", name))
            answer = exported if isinstance(exported, ApiError) else await call(
                target, import_request(name, base64.b64decode(exported["file"])))
            if isinstance(answer, ApiError):
                log.warning("could not copy the voice %r to a server: %s", name, answer.message)
                continue
            have.add(name)
            copied.append(name)
    return copied


def merged_register(answers: list) -> dict | ApiError:
    """Every server's answer to one register: the voice, or the error that matters most (a client error, which
    every server of a model gives alike, before a 503). Behind one gateway of several models, a server whose model
    clones no voice (`reference_unsupported`) is no failure where another server's model took the voice."""
    cloning = [a for a in answers if not (isinstance(a, ApiError) and a.code == REFERENCE_UNSUPPORTED)]
    return _first_error(cloning or answers) or {"object": "voice", **cloning[0]}


def merged_delete(name: str, answers: list) -> dict | ApiError:
    """Deleted where it was; a 404 only when no server had it."""
    missing = [a for a in answers if isinstance(a, ApiError) and a.code == "voice_not_found"]
    error = _first_error([a for a in answers if not any(a is m for m in missing)])
    if error is not None:
        return error
    if len(missing) == len(answers):
        return missing[0]
    return {"object": "voice", "name": name, "deleted": True}


def merged_list(answers: list) -> dict | ApiError:
    """The voices of every server, by name (servers that share a directory list the same ones)."""
    error = _first_error(answers)
    if error is not None:
        return error
    voices = {}
    for answer in answers:
        for voice in answer["data"]:
            voices.setdefault(voice["name"], {"object": "voice", **voice})
    return {"object": "list", "data": [voices[name] for name in sorted(voices)]}


def _first_error(answers: list) -> ApiError | None:
    errors = [a for a in answers if isinstance(a, ApiError)]
    return min(errors, key=lambda e: (e.status >= 500, e.status)) if errors else None


def no_server() -> ApiError:
    return unavailable("no Triton server is ready to take the voice registry's call")


def upload_param(error: ApiError) -> ApiError:
    """A server's refusal of an upload, naming the form's field rather than the Triton input."""
    param = UPLOAD_PARAMS.get(error.param, error.param)
    return error if param == error.param else ApiError(error.status, error.message, error.type, param, error.code,
                                                       error.retry_after_s)
