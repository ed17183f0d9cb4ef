"""The gateway's side of the voice registry without a server: reference files decoded, the upload form and the
speech route's `ref_audio` checked, the registry's answers from several servers merged, its codes' statuses."""
from __future__ import annotations

import asyncio
import base64
import io
import wave

import numpy as np
import pytest
import soundfile

from audio.decoding import AudioFileError, decode_reference
from server.gateway.errors import ApiError, from_ended
from server.gateway.speech import parse_speech
from server.gateway.voices import merged_delete, merged_list, merged_register, registry_request, upload_param
from protocol.reasons import Ended, EndReason
from tests.reference_audio import voiced

RATE = 16000
AUDIO = voiced(1.0, RATE)


def wav_bytes(audio: np.ndarray, rate: int = RATE, channels: int = 1) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(channels)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(pcm16(np.repeat(audio, channels)).tobytes())
    return buffer.getvalue()


def pcm16(audio: np.ndarray) -> np.ndarray:
    return np.round(audio * 32767).astype("<i2")


WAV_SAMPLES = pcm16(AUDIO).astype(np.float32) / 32768  # what a 16-bit WAV of AUDIO decodes to, exactly


def encoded(fmt: str, subtype: str, audio: np.ndarray = AUDIO) -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, audio, RATE, format=fmt, subtype=subtype)
    return buffer.getvalue()


@pytest.mark.parametrize("data, fmt, tolerance", [
    (wav_bytes(AUDIO), "wav", 0.0),
    (wav_bytes(AUDIO, channels=2), "wav", 0.0),  # channels averaged
    (encoded("FLAC", "PCM_16"), "flac", 2 / 32767),
    (encoded("OGG", "VORBIS"), "ogg", None),
    (encoded("OGG", "OPUS"), "ogg", None),
])
def test_wav_flac_and_ogg_decode_to_mono_float32_at_their_rate(data, fmt, tolerance):
    decoded = decode_reference(data)
    assert decoded.format == fmt and decoded.samples.dtype == np.float32 and decoded.samples.ndim == 1
    if tolerance is not None:
        assert decoded.sample_rate == RATE and decoded.samples.size == AUDIO.size
        assert np.abs(decoded.samples - (WAV_SAMPLES if fmt == "wav" else AUDIO)).max() <= tolerance
    else:  # lossy: the rate it was coded at (Opus: 48 kHz), about the length
        assert decoded.samples.size > 0.9 * AUDIO.size * decoded.sample_rate / RATE
    np.testing.assert_array_equal(decode_reference(data).samples, decoded.samples)  # the same bytes, the same samples


@pytest.mark.parametrize("data, code", [
    (b"not audio at all", "invalid_audio"),
    (b"", "invalid_audio"),
    (wav_bytes(np.zeros(0, np.float32)), "invalid_audio"),
    (encoded("AIFF", "PCM_16"), "unsupported_audio_format"),
])
def test_what_is_not_a_reference_file_is_refused_with_a_code(data, code):
    with pytest.raises(AudioFileError) as refused:
        decode_reference(data)
    assert refused.value.code == code


def speech(**fields):
    return parse_speech({"model": "m", "input": "Hi.", **fields}, ("m",))


def test_speech_takes_an_inline_reference_as_base64_of_a_file():
    request = speech(ref_audio=base64.b64encode(wav_bytes(AUDIO)).decode(), ref_text="A reference.", seed=1)
    params = request.params
    assert params["ref_sample_rate"] == RATE and params["ref_text"] == "A reference." and params["seed"] == 1
    np.testing.assert_array_equal(params["ref_audio"], WAV_SAMPLES)
    url = "data:audio/wav;base64," + base64.b64encode(wav_bytes(AUDIO)).decode()
    np.testing.assert_array_equal(speech(ref_audio=url, x_vector_only=True).params["ref_audio"], params["ref_audio"])
    assert speech(ref_audio=url, x_vector_only=True).params["x_vector_only"] is True


@pytest.mark.parametrize("fields, param, code", [
    (dict(ref_audio="***"), "ref_audio", "invalid_base64"),
    (dict(ref_audio=base64.b64encode(b"plain text").decode()), "ref_audio", "invalid_audio"),
    (dict(ref_audio=3), "ref_audio", None),
    (dict(ref_text=5), "ref_text", None),
    (dict(x_vector_only="yes"), "x_vector_only", None),
])
def test_a_bad_inline_reference_is_a_400_naming_its_field(fields, param, code):
    error = speech(**fields)
    assert isinstance(error, ApiError) and (error.status, error.param, error.code) == (400, param, code)


def test_the_registry_s_codes_have_their_statuses():
    assert from_ended(Ended(EndReason.REFUSED_BAD_INPUT, "no voice", "name", "voice_not_found")).status == 404
    assert from_ended(Ended(EndReason.REFUSED_BAD_INPUT, "taken", "name", "voice_exists")).status == 409
    assert from_ended(Ended(EndReason.REFUSED_BAD_INPUT, "bad", "name", "bad_voice_name")).status == 400
    short = from_ended(Ended(EndReason.REFUSED_BAD_INPUT, "short", "ref_audio", "ref_audio_too_short"))
    assert (upload_param(short).param, upload_param(short).code) == ("file", "ref_audio_too_short")


VOICE = {"name": "alice", "transcript": None, "x_vector_only": True, "sample_rate": RATE, "duration_s": 1.0,
         "created": 1}
NOT_FOUND = ApiError(404, "no voice", param="name", code="voice_not_found")
DOWN = ApiError(503, "down", code="unavailable", retry_after_s=1)
BAD = ApiError(400, "too short", param="ref_audio", code="ref_audio_too_short")


def test_answers_of_several_servers_merge():
    assert merged_register([VOICE, VOICE]) == {"object": "voice", **VOICE}
    assert merged_register([VOICE, DOWN]) is DOWN and merged_register([DOWN, BAD]) is BAD  # a client error first
    assert merged_delete("alice", [{**VOICE, "deleted": True}, NOT_FOUND])["deleted"] is True  # a shared directory
    assert merged_delete("alice", [NOT_FOUND, NOT_FOUND]) is NOT_FOUND
    assert merged_delete("alice", [NOT_FOUND, DOWN]) is DOWN
    bob = {**VOICE, "name": "bob"}
    listed = merged_list([{"data": [bob, VOICE]}, {"data": [VOICE]}])
    assert [v["name"] for v in listed["data"]] == ["alice", "bob"] and listed["object"] == "list"
    assert merged_list([{"data": []}, DOWN]) is DOWN


def test_a_register_request_carries_the_reference_as_the_router_takes_it():
    from server.gateway.voices import VoiceUpload
    decoded = decode_reference(wav_bytes(AUDIO))
    proto = registry_request("register", "alice", VoiceUpload("alice", decoded, "Words.", None))
    shapes = {t.name: (t.datatype, list(t.shape)) for t in proto.inputs}
    assert proto.model_name == "voice_registry"
    assert shapes == {"action": ("BYTES", [1]), "name": ("BYTES", [1]), "ref_audio": ("FP32", [AUDIO.size]),
                      "ref_sample_rate": ("INT32", [1]), "ref_text": ("BYTES", [1])}
    assert [t.name for t in registry_request("list").inputs] == ["action"]


def post_form(form_parts: list[tuple[str, bytes, str | None]] | None, json_body: dict | None = None) -> object:
    """What `read_upload` makes of one POST (multipart parts: (field, bytes, filename)), on a real aiohttp server."""
    import asyncio

    import aiohttp
    from aiohttp import web
    from aiohttp.test_utils import TestClient, TestServer

    from server.gateway.voices import read_upload
    seen = []

    async def handler(request):
        seen.append(await read_upload(request, asyncio.Semaphore(1)))
        return web.Response()

    async def run():
        app = web.Application()
        app.router.add_post("/v1/audio/voices", handler)
        async with TestClient(TestServer(app)) as client:
            if json_body is not None:
                await client.post("/v1/audio/voices", json=json_body)
            else:
                form = aiohttp.FormData()
                for name, data, filename in form_parts:
                    form.add_field(name, data if filename else data.decode(), filename=filename)
                await client.post("/v1/audio/voices", data=form)
    asyncio.run(run())
    return seen[0]


def test_an_upload_is_read_and_decoded():
    upload = post_form([("file", wav_bytes(AUDIO), "me.wav"), ("name", b"me", None), ("transcript", b"Words.", None),
                        ("x_vector_only", b"false", None)])
    assert (upload.name, upload.transcript, upload.x_vector_only, upload.audio.sample_rate) == ("me", "Words.", False,
                                                                                              RATE)
    np.testing.assert_array_equal(upload.audio.samples, WAV_SAMPLES)
    assert post_form([("file", wav_bytes(AUDIO), "me.wav"), ("name", b"me", None),
                      ("ref_text", b"Words.", None)]).transcript == "Words."


@pytest.mark.parametrize("parts, json_body, status, param, code", [
    (None, {"name": "me"}, 400, "file", None),
    ([("name", b"me", None)], None, 400, "file", None),
    ([("file", wav_bytes(AUDIO), "me.wav")], None, 400, "name", None),
    ([("file", wav_bytes(AUDIO), "me.wav"), ("name", b"me", None), ("colour", b"red", None)], None, 400, "colour",
     None),
    ([("file", wav_bytes(AUDIO), "me.wav"), ("name", b"a/b", None)], None, 400, "name", "bad_voice_name"),
    ([("file", wav_bytes(AUDIO), "me.wav"), ("name", b"nova", None)], None, 400, "name", "reserved_voice_name"),
    ([("file", wav_bytes(AUDIO), "me.wav"), ("name", b"me", None), ("x_vector_only", b"maybe", None)], None, 400,
     "x_vector_only", None),
    ([("file", b"RIFF and nothing", "me.wav"), ("name", b"me", None)], None, 400, "file", "invalid_audio"),
    ([("file", b"\0" * (16 << 20) + b"!", "big.wav"), ("name", b"me", None)], None, 413, "file",
     "request_entity_too_large"),
], ids=["json", "no-file", "no-name", "unknown-field", "bad-name", "openai-name", "bad-flag", "not-audio", "too-big"])
def test_a_bad_upload_is_refused_naming_its_field(parts, json_body, status, param, code):
    error = post_form(parts, json_body)
    assert isinstance(error, ApiError) and (error.status, error.param, error.code) == (status, param, code), error


class FakeRegistries:
    """Several servers' voice registries, by server: list, export and import over `call(server, proto)`."""

    def __init__(self, voices: dict[str, dict[str, bytes]], down: tuple[str, ...] = ()) -> None:
        self.voices, self.down, self.calls = voices, down, []

    async def __call__(self, server: str, proto):
        inputs = {t.name: raw for t, raw in zip(proto.inputs, proto.raw_input_contents)}
        action, name = inputs["action"][4:].decode(), inputs.get("name", b"    ")[4:].decode()
        self.calls.append((server, action, name))
        if server in self.down:
            return DOWN
        held = self.voices[server]
        if action == "list":
            return {"object": "list", "data": [{"name": n} for n in sorted(held)]}
        if action == "export":
            return {"name": name, "file": base64.b64encode(held[name]).decode()}
        assert action == "import"
        held[name] = inputs["voice_file"][4:]
        return {"name": name}


def test_a_server_gets_the_voices_it_lacks_copied_as_they_are():
    import asyncio

    from server.gateway.voices import copy_missing_voices
    fake = FakeRegistries({"a": {"alice": b"A", "bob": b"B"}, "b": {"carol": b"C"}, "c": {"alice": b"A"}})
    copied = asyncio.run(copy_missing_voices(fake, "c", ["a", "b"]))
    assert copied == ["bob", "carol"] and fake.voices["c"] == {"alice": b"A", "bob": b"B", "carol": b"C"}
    assert fake.voices["a"] == {"alice": b"A", "bob": b"B"}  # the sources are left as they were
    assert ("a", "export", "alice") not in fake.calls  # what it has is not copied again


def test_a_server_that_fails_is_skipped():
    import asyncio

    from server.gateway.voices import copy_missing_voices
    fake = FakeRegistries({"a": {"alice": b"A"}, "b": {"bob": b"B"}, "c": {}}, down=("a",))
    assert asyncio.run(copy_missing_voices(fake, "c", ["a", "b"])) == ["bob"]
    assert asyncio.run(copy_missing_voices(FakeRegistries({"c": {}}, down=("c",)), "c", [])) == []
