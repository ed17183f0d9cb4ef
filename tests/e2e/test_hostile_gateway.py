"""A client's bad input never gets a 500 from the gateway: each case below, once a 500 as text/plain (or a WebSocket
closed with 1006), is a 400 in OpenAI's JSON naming the problem, a float sample rate is read as the integer it is,
and the gateway serves the next request as before."""
from __future__ import annotations

import asyncio
import base64
import io
import json
import struct
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import aiohttp
import numpy as np
import pytest

SPEECH = {"model": "qwen3-tts-tiny", "input": "Hi.", "voice": "tiny", "seed": 1, "max_audio_seconds": 0.4,
          "ignore_eos": True}
BOUNDARY = "VoxBoundary"


def post(url: str, data: bytes, content_type: str = "application/json") -> tuple[int, dict, bytes]:
    request = urllib.request.Request(url, data=data, method="POST", headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def wav(format_tag: int) -> bytes:
    data = bytes(3200)
    fmt = struct.pack("<HHIIHH", format_tag, 1, 16000, 32000, 2, 16)
    return (b"RIFF" + struct.pack("<I", 36 + len(data)) + b"WAVE" + b"fmt " + struct.pack("<I", 16) + fmt
            + b"data" + struct.pack("<I", len(data)) + data)


def form(audio: bytes, close: bool = True) -> bytes:
    parts = [f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="name"\r\n\r\nhostile\r\n'.encode(),
             f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n'
             f'Content-Type: audio/wav\r\n\r\n'.encode() + audio + b"\r\n",
             f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="transcript"\r\n\r\nhello\r\n'.encode()]
    return b"".join(parts) + (f"--{BOUNDARY}--\r\n".encode() if close else b"")


def refusal(answer: tuple[int, dict, bytes]) -> tuple[int, str | None, str]:
    status, headers, body = answer
    assert headers["Content-Type"].startswith("application/json"), body[:200]
    error = json.loads(body)["error"]
    return status, error["code"], error["message"]


@pytest.mark.parametrize("body, says", [
    ("[" * 5000 + "]" * 5000, "nested too deeply"),
    ('{"a": ' * 5000 + "1" + "}" * 5000, "nested too deeply"),
    ('{"model": "qwen3-tts-tiny", "input": "Hi.", "seed": ' + "9" * 5000 + "}", "digits"),
    ("\x00{", "not valid JSON"),
], ids=["nested-array", "nested-object", "5000-digit-integer", "garbage"])
def test_bodies_json_cannot_read_are_a_400_naming_why(gateway, body, says):
    status, _, message = refusal(post(gateway.url + "/v1/audio/speech", body.encode()))
    assert status == 400 and says in message


def test_a_body_that_is_not_utf8_is_a_400(gateway):
    status, _, message = refusal(post(gateway.url + "/v1/audio/speech", b'{"input": "\xff\xfe"}'))
    assert status == 400 and "not valid JSON" in message


@pytest.mark.parametrize("fmt", ["mp3", "pcm"])
def test_a_float_sample_rate_is_the_integer_it_holds(gateway, fmt):
    status, headers, audio = post(gateway.url + "/v1/audio/speech",
                                  json.dumps({**SPEECH, "response_format": fmt, "sample_rate": 16000.0}).encode())
    assert status == 200 and headers["X-Sample-Rate"] == "16000" and audio


@pytest.mark.parametrize("body, content_type, code", [
    (form(wav(0x1234)), f"multipart/form-data; boundary={BOUNDARY}", "unsupported_audio_format"),
    (form(wav(1)), "multipart/form-data", "invalid_multipart"),  # no boundary
    (form(wav(1), close=False), f"multipart/form-data; boundary={BOUNDARY}", "invalid_multipart"),
], ids=["unknown-wav-format-tag", "no-boundary", "no-closing-boundary"])
def test_broken_voice_uploads_are_a_400_naming_the_problem(gateway, body, content_type, code):
    status, got, _ = refusal(post(gateway.url + "/v1/audio/voices", body, content_type))
    assert (status, got) == (400, code)


def test_an_inline_reference_of_an_unknown_wav_format_is_a_400(gateway):
    body = {**SPEECH, "ref_audio": base64.b64encode(wav(0x1234)).decode(), "ref_text": "hello"}
    status, code, _ = refusal(post(gateway.url + "/v1/audio/speech", json.dumps(body).encode()))
    assert (status, code) == (400, "unsupported_audio_format")


def test_a_websocket_message_nested_too_deep_is_invalid_json_and_the_socket_stays_open(gateway):
    async def run() -> list[dict]:
        answers = []
        async with aiohttp.ClientSession() as session:
            async with session.ws_connect(gateway.url.replace("http", "ws") + "/v1/audio/speech/stream") as socket:
                for message in ("[" * 5000 + "]" * 5000, '{"type": "x", "n": ' + "9" * 5000 + "}", "{}"):
                    await socket.send_str(message)
                    answers.append(await socket.receive_json(timeout=10))
        return answers

    nested, digits, shapeless = asyncio.run(run())
    assert nested["code"] == digits["code"] == "invalid_json" and "nested too deeply" in nested["message"]
    assert shapeless["code"] == "invalid_message"  # the third message was read: the socket stayed open


def test_the_gateway_serves_on_after_all_of_it(gateway):
    status, _, audio = post(gateway.url + "/v1/audio/speech", json.dumps({**SPEECH, "response_format": "pcm"}).encode())
    assert status == 200 and len(audio) == 5 * 1920 * 2


def memory_kb(pid: int) -> dict[str, int]:
    """VmHWM (the process's peak resident memory so far) and VmRSS, in kB."""
    fields = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status"))
    return {key: int(fields[key].split()[0]) for key in ("VmHWM", "VmRSS")}


def test_references_the_server_would_refuse_are_refused_from_their_header_in_little_memory(gateway):
    """Sixteen ~40 kB FLACs of 59 s at 192 kHz at once: each was decoded into 45 MB of samples, sent through Triton
    and only then refused (the gateway peaked at 852 MB and kept 766 MB). The gateway's limits are the server's: a
    rate past 48 kHz is refused from the file's header, with the server's code, and nothing is decoded."""
    import soundfile
    buffer = io.BytesIO()
    soundfile.write(buffer, np.full(59 * 192_000, 3, np.int16), 192_000, format="FLAC")
    body = json.dumps({**SPEECH, "ref_audio": base64.b64encode(buffer.getvalue()).decode(), "ref_text": "hello"})
    post(gateway.url + "/v1/audio/speech", body.encode())  # the first loads PyAV and starts the decoding threads
    before = memory_kb(gateway.process.pid)
    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda _: post(gateway.url + "/v1/audio/speech", body.encode()), range(16)))
    after = memory_kb(gateway.process.pid)
    print(f"gateway memory before and after (kB): {before} {after}")  # shown with -s
    for answer in answers:
        status, code, message = refusal(answer)
        assert (status, code) == (400, "unsupported_ref_sample_rate") and "192000 Hz" in message, message
    assert after["VmHWM"] - before["VmHWM"] < 32 * 1024, (before, after)  # the peak, in kB
    assert after["VmRSS"] - before["VmRSS"] < 16 * 1024, (before, after)  # what it keeps
