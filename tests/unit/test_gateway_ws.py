"""The gateway's WebSocket route without a server: its messages checked into values, the Triton sequence
it sends (a fake gRPC call), the move to another server before any event, and the socket's states
(a real aiohttp socket in front of a fake session)."""
from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path

import numpy as np
import pytest
from aiohttp import WSMsgType
from aiohttp.test_utils import TestClient, TestServer
from tritonclient.grpc import service_pb2
from tritonclient.utils import deserialize_bytes_tensor

from audio.pcm import pcm16, wav_header
from server.gateway import service
from server.gateway.app import build_app
from server.gateway.config import GatewayConfig
from server.gateway.errors import bad_request, from_ended
from server.gateway.triton_session import PieceRefused, SessionText, TritonSession, piece_request, session_request
from server.gateway.triton_stream import AudioChunk, StreamFailure
from server.gateway.ws_session import (AudioMessages, ErrorCode, ResponseCancel, SessionUpdate, SocketError,
                                        TextAppend, TextDone, cancelled_event, default_session, from_api_error,
                                        parse_message, parse_session)
from protocol.reasons import Ended, EndReason

MODELS = ("qwen3-tts-tiny",)
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("data, expected", [
    ('{"type": "session.update", "session": {"seed": 1}}', SessionUpdate({"seed": 1})),
    ('{"type": "input_text.append", "text": "Get the"}', TextAppend("Get the")),
    ('{"type": "input_text.done"}', TextDone()),
    ('{"type": "response.cancel"}', ResponseCancel()),
    ('{"type": "response.cancel", "audio_end_ms": 1250}', ResponseCancel(1.25)),
])
def test_the_four_messages_parse_into_values(data, expected):
    assert parse_message(data) == expected


@pytest.mark.parametrize("data, code, param", [
    ("{not json", "invalid_json", None),
    ("[1, 2]", "invalid_message", "type"),
    ('{"type": 3}', "invalid_message", "type"),
    ('{"type": "response.create"}', "unknown_type", "type"),
    ('{"type": "input_text.append"}', "invalid_message", "text"),
    ('{"type": "input_text.append", "text": 5}', "invalid_message", "text"),
    ('{"type": "input_text.append", "text": "\\ud800"}', "invalid_value", "text"),  # a lone surrogate
    ('{"type": "input_text.done", "text": "late"}', "invalid_message", "text"),  # unknown keys are refused
    ('{"type": "session.update", "session": "alloy"}', "invalid_message", "session"),
    ('{"type": "response.cancel", "audio_end_ms": -1}', "invalid_message", "audio_end_ms"),
    ('{"type": "response.cancel", "audio_end_ms": "soon"}', "invalid_message", "audio_end_ms"),
    ('{"type": "response.cancel", "item": 1}', "invalid_message", "item"),
])
def test_bad_messages_are_named(data, code, param):
    error = parse_message(data)
    assert isinstance(error, SocketError) and (error.code, error.param) == (code, param), error
    assert error.message and json.dumps(error.to_json())


def test_a_barge_in_reports_the_time_reached_and_the_words_started_by_then():
    words = [{"word": "Get", "start": 0.0, "end": 0.29}, {"word": "the", "start": 0.29, "end": 0.57},
             {"word": "trust", "start": 0.57, "end": 1.0}]
    assert cancelled_event(2.0, words, None)["last_word"] == "trust"  # no position: all that was sent
    at = cancelled_event(2.0, words, 0.5)
    assert (at["audio_seconds"], at["audio_sent_seconds"], at["last_word"], at["words_spoken"]) == (0.5, 2.0, "the", 2)
    assert cancelled_event(0.4, words, 9.0)["audio_seconds"] == 0.4  # never past what was sent
    assert cancelled_event(0.0, [], None)["last_word"] is None


def test_session_fields_are_the_http_routes_plus_the_idle_timeout():
    assert parse_session({}, MODELS) == default_session(MODELS)
    parsed = parse_session({"voice": "tiny", "response_format": "wav", "sample_rate": 16000, "seed": 3,
                            "temperature": 0, "text_idle_timeout_s": 2}, MODELS)
    assert (parsed.model, parsed.voice, parsed.response_format, parsed.sample_rate) == MODELS + ("tiny", "wav", 16000)
    assert parsed.params == {"seed": 3, "temperature": 0.0, "text_idle_timeout_s": 2.0}
    assert parse_session({"model": "tts-1", "voice": "alloy"}, MODELS).voice is None  # OpenAI's names as on HTTP


@pytest.mark.parametrize("fields, code, param", [
    ({"response_format": "mp3"}, "invalid_value", "response_format"),
    ({"seed": "five"}, "invalid_value", "seed"),
    ({"seed": 2 ** 63}, "invalid_value", "seed"),
    ({"text_idle_timeout_s": "soon"}, "invalid_value", "text_idle_timeout_s"),
    ({"model": "tts-9000"}, "model_not_found", "model"),
    ({"input": "Hello."}, "invalid_value", "input"),  # the text comes as messages
    ({"stream_format": "sse"}, "invalid_value", "stream_format"),
    ({"speed": 9}, "invalid_value", "speed"),
    ({"sample_rate": 11025}, "invalid_value", "sample_rate"),
])
def test_bad_session_fields_are_named(fields, code, param):
    error = parse_session(fields, MODELS)
    assert isinstance(error, SocketError) and (error.code, error.param) == (code, param), error


def test_server_errors_keep_their_codes_and_the_text_field_is_named_text():
    piece = from_ended(Ended(EndReason.REFUSED_BAD_INPUT, "piece 2 ...", param="text", code="bad_piece"))
    assert from_api_error(piece, ErrorCode.BAD_INPUT).to_json() == {"type": "error", "code": "bad_piece",
                                                           "message": "piece 2 ...", "param": "text"}
    assert from_api_error(bad_request("the text is empty", "input"), ErrorCode.BAD_INPUT).code == "bad_input"
    idle = from_ended(Ended(EndReason.CANCELLED, "no piece for 1.5 s", code="text_idle_timeout"))
    assert (idle.status, from_api_error(idle, ErrorCode.BAD_INPUT).code) == (408, "text_idle_timeout")
    assert from_ended(Ended(EndReason.CANCELLED, "cancelled")).code == "internal_error"  # no code: as before


def chunk(index: int, num_samples: int = 240, rate: int = 24000) -> AudioChunk:
    return AudioChunk(index, np.linspace(-0.5, 0.5, num_samples, dtype=np.float32), rate, "urgent", time.perf_counter())


def test_wav_messages_start_with_the_header_then_the_same_pcm():
    audio = AudioMessages(parse_session({"response_format": "wav"}, MODELS))
    first, second = audio.encode(chunk(0)), audio.encode(chunk(1))
    assert first == wav_header(24000) + pcm16(chunk(0).audio) and second == pcm16(chunk(1).audio)
    assert audio.finish() == b""
    assert audio.done() == {"type": "audio.done", "audio_seconds": 0.02, "num_chunks": 2, "sample_rate": 24000}


def test_pcm_resampled_keeps_its_duration_and_a_session_without_audio_says_so():
    audio = AudioMessages(parse_session({"sample_rate": 16000}, MODELS))
    data = b"".join(audio.encode(chunk(i, 2400)) for i in range(4)) + audio.finish()
    assert len(data) == 2 * 6400 and audio.done()["sample_rate"] == 16000  # 0.4 s at 16 kHz
    assert AudioMessages(default_session(MODELS)).done()["sample_rate"] is None


def inputs(proto: service_pb2.ModelInferRequest) -> dict:
    return {t.name: deserialize_bytes_tensor(raw)[0] if t.datatype == "BYTES" else np.frombuffer(raw, "u1")[0]
            for t, raw in zip(proto.inputs, proto.raw_input_contents)}


def sequence(proto) -> tuple:
    p = proto.parameters
    return p["sequence_id"].int64_param, p["sequence_start"].bool_param, p["sequence_end"].bool_param


def test_the_first_request_opens_the_sequence_with_an_empty_text_and_pieces_carry_only_text():
    request = parse_session({"seed": 4, "text_idle_timeout_s": 1.5, "voice": "tiny"}, MODELS)
    first = session_request(request, 77)
    assert sequence(first) == (77, True, False)
    assert {"text", "voice", "seed", "text_idle_timeout_s", "client_acks"} == set(inputs(first))
    assert inputs(first)["text"] == b"" and first.parameters["triton_enable_empty_final_response"].bool_param
    piece = piece_request("r-3", 77, " fund €", is_last=True)
    assert sequence(piece) == (77, False, True) and inputs(piece) == {"text": " fund €".encode()}
    assert "triton_enable_empty_final_response" not in piece.parameters  # a piece's empty answer is not wanted


class FakeCall:
    """A ModelStreamInfer call: takes every request sent, answers with `script(requests)` responses."""

    def __init__(self, requests, script) -> None:
        self.sent: list = []
        self._taker = asyncio.ensure_future(self._take(requests))
        self._script = script

    async def _take(self, requests) -> None:
        async for message in requests:
            self.sent.append(message)

    async def __aiter__(self):
        async for response in self._script(self.sent):
            yield response

    async def code(self):
        await self._taker

    def cancel(self) -> None:
        self._taker.cancel()


class FakeStub:
    def __init__(self, script) -> None:
        self.script, self.calls = script, []

    def ModelStreamInfer(self, requests, timeout):  # noqa: N802 (gRPC's name)
        self.calls.append(FakeCall(requests, self.script))
        return self.calls[-1]


def response(request_id: str, index: int | None = None, final: bool = False, error: str = ""):
    proto = service_pb2.ModelStreamInferResponse(error_message=error)
    proto.infer_response.id = request_id
    proto.infer_response.parameters["triton_final_response"].bool_param = final
    if index is not None:
        for name, dtype, value in (("audio", "FP32", np.full(4, 0.25, np.float32)),
                                   ("sample_rate", "INT32", np.array([24000], np.int32)),
                                   ("chunk_index", "INT32", np.array([index], np.int32))):
            proto.infer_response.outputs.add(name=name, datatype=dtype, shape=[value.size])
            proto.infer_response.raw_output_contents.append(value.tobytes())
        proto.infer_response.outputs.add(name="lane", datatype="BYTES", shape=[1])
        proto.infer_response.raw_output_contents.append(len(b"urgent").to_bytes(4, "little") + b"urgent")
    return proto


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_a_session_yields_chunks_and_refused_pieces_and_acks_each_chunk_it_was_asked_past():
    async def script(sent):
        await settle()
        main = sent[0].id
        yield response(main, 0)
        yield response(f"{main}-1", error="[bad_input param=text code=bad_piece] piece 1 is not valid UTF-8")
        yield response(f"{main}-2", final=True)  # a piece's own answer: no event
        yield response(main, 1, final=True)

    async def run():
        text, stub = SessionText(), FakeStub(script)
        session = TritonSession(stub, default_session(MODELS), text, timeout_s=10)
        text.append("Get the")
        text.append(" fund")
        text.close()
        events = [event async for event in session.events()]
        return events, stub.calls[0].sent, text

    events, sent, text = asyncio.run(run())
    assert [type(e) for e in events] == [AudioChunk, PieceRefused, AudioChunk]
    assert events[1].error.code == "bad_piece" and not text.can_replay
    assert [inputs(m).get("text") for m in sent[1:4]] == [b"Get the", b" fund", b""]
    assert [sequence(m)[2] for m in sent[1:4]] == [False, False, True]
    assert [inputs(m)["ack_chunk"] for m in sent[4:]] == [0, 1]  # 1 too: the caller asked past it


def test_an_error_without_a_piece_code_ends_the_session():
    async def script(sent):
        await settle()
        yield response(sent[0].id, error="[bad_input param=text] the streamed text is bad: the text is empty")

    async def run():
        session = TritonSession(FakeStub(script), default_session(MODELS), SessionText(), timeout_s=10)
        return [event async for event in session.events()]

    with pytest.raises(StreamFailure) as caught:
        asyncio.run(run())
    assert caught.value.reason is EndReason.REFUSED_BAD_INPUT and caught.value.error.param == "input"


def test_a_session_refused_before_any_event_moves_to_the_next_server_with_its_pieces(monkeypatch):
    async def overloaded(sent):
        await settle()
        yield response(sent[0].id, error="[overloaded] server overloaded: 8 requests already wait")

    async def serves(sent):
        await settle()
        yield response(sent[0].id, 0, final=True)

    stubs = {"a:1": FakeStub(overloaded), "b:1": FakeStub(serves)}
    monkeypatch.setattr(service.Gateway, "_stub", lambda self, backend: stubs[backend.url])
    gateway = service.Gateway(GatewayConfig(tritons=("a:1", "b:1")))

    async def run():
        text = SessionText()
        text.append("Get the")
        text.close()
        return [event.index async for event in gateway.speak_text(default_session(MODELS), text)]

    assert asyncio.run(run()) == [0]
    moved = stubs["b:1"].calls[0].sent
    assert [inputs(m).get("text") for m in moved[1:3]] == [b"Get the", b""] and sequence(moved[2])[2]
    assert [b.num_live for b in gateway.balancer.backends] == [0, 0]


class FakePieces:
    """A Triton session that takes the text and, once it is closed, answers with two chunks."""

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.closed = asyncio.Event()

    def send_piece(self, text: str, is_last: bool) -> None:
        self.pieces.append(text)
        if is_last:
            self.closed.set()


def socket_gateway(monkeypatch) -> tuple[service.Gateway, list[FakePieces]]:
    sessions: list[FakePieces] = []

    async def speak_text(self, request, text):
        sessions.append(FakePieces())
        text.attach(sessions[-1])
        await sessions[-1].closed.wait()
        for i in range(2):
            yield chunk(i)

    monkeypatch.setattr(service.Gateway, "speak_text", speak_text)
    gateway = service.Gateway(GatewayConfig())
    gateway.model_ids = MODELS
    return gateway, sessions


async def receive_all(ws) -> list:
    return [m.data if m.type is WSMsgType.BINARY else json.loads(m.data) async for m in ws]


def test_bad_messages_get_error_events_and_the_socket_goes_on(monkeypatch):
    gateway, sessions = socket_gateway(monkeypatch)

    async def run():
        async with TestClient(TestServer(build_app(gateway))) as client:
            ws = await client.ws_connect("/v1/audio/speech/stream")
            await ws.send_str("{not json")
            await ws.send_bytes(b"\x00\x01")
            await ws.send_json({"type": "session.update", "session": {"seed": "five"}})
            await ws.send_json({"type": "session.update", "session": {"response_format": "wav"}})
            await ws.send_json({"type": "input_text.append", "text": "Get the"})
            await ws.send_json({"type": "session.update", "session": {"seed": 2}})
            await ws.send_json({"type": "input_text.done"})
            await ws.send_json({"type": "input_text.append", "text": " late"})
            return await receive_all(ws)

    received = asyncio.run(run())
    events = [m for m in received if isinstance(m, dict)]
    assert [e.get("code") for e in events] == ["invalid_json", "invalid_message", "invalid_value", "session_started",
                                               "text_closed", None]
    assert events[-1] == {"type": "audio.done", "audio_seconds": 0.02, "num_chunks": 2, "sample_rate": 24000}
    audio = [m for m in received if isinstance(m, bytes)]
    assert audio == [wav_header(24000) + pcm16(chunk(0).audio), pcm16(chunk(1).audio)]
    assert sessions[0].pieces == ["Get the", ""]  # the bad and late messages sent nothing


def test_done_with_no_text_opens_and_closes_the_session_at_once(monkeypatch):
    gateway, sessions = socket_gateway(monkeypatch)

    async def run():
        async with TestClient(TestServer(build_app(gateway))) as client:
            ws = await client.ws_connect("/v1/audio/speech/stream")
            await ws.send_json({"type": "input_text.done"})
            return await receive_all(ws)

    assert asyncio.run(run())[-1]["type"] == "audio.done" and sessions[0].pieces == [""]


def test_the_documented_example_is_the_tested_code():
    source = (ROOT / "clients/text_stream_ws.py").read_text()
    example = re.search(r"# example: begin\n(.*?)# example: end\n", source, re.S).group(1)
    for doc in ("docs/STREAMING.md", "docs/GATEWAY.md"):
        assert example in (ROOT / doc).read_text(), f"{doc} does not show clients/text_stream_ws.py's example"


def test_a_session_takes_an_enrollment_inline_as_the_http_route_takes_a_reference():
    """`ref_audio` (the base64 of a WAV, FLAC or Ogg file) with `x_vector_only` in session.update: decoded here and
    sent as the router's reference inputs, as on `POST /v1/audio/speech`."""
    import base64
    import io
    import wave

    samples = (np.sin(np.arange(16000) / 8) * 0.3).astype(np.float32)
    with io.BytesIO() as buffer:
        with wave.open(buffer, "wb") as out:
            out.setnchannels(1), out.setsampwidth(2), out.setframerate(16000)
            out.writeframes(pcm16(samples))
        data = base64.b64encode(buffer.getvalue()).decode()
    parsed = parse_session({"input_sample_rate": 24000, "ref_audio": data, "x_vector_only": True}, MODELS)
    assert parsed.params["ref_sample_rate"] == 16000 and parsed.params["x_vector_only"] is True
    np.testing.assert_allclose(parsed.params["ref_audio"], samples, atol=2 / 32768)  # 16-bit: x 32767, / 32768
    for fields, code in (({"ref_audio": "not base64!"}, "invalid_base64"), ({"ref_audio": "AAAA"}, "invalid_audio"),
                         ({"x_vector_only": "yes"}, "invalid_value")):
        error = parse_session(fields, MODELS)
        assert isinstance(error, SocketError) and (error.code, error.param) == (code, next(iter(fields))), error


def test_a_session_s_pcm_comes_at_openai_s_rate_and_wav_at_the_model_s():
    assert default_session(MODELS).sample_rate == 24000 == parse_session({"response_format": "pcm"}, MODELS).sample_rate
    assert parse_session({"response_format": "wav"}, MODELS).sample_rate is None
    zonos_rate = 44100
    audio = AudioMessages(default_session(MODELS))
    data = audio.encode(chunk(0, 4410, zonos_rate)) + audio.finish()
    assert len(data) == 2 * 2400 and audio.done()["sample_rate"] == 24000  # 0.1 s at 24 kHz


def test_the_refusal_of_a_session_without_a_voice_names_what_the_socket_takes():
    """The server's `missing_ref_audio` speaks of its Triton inputs (`ref_sample_rate`); the socket's names the
    session fields a client sets."""
    refused = from_ended(Ended(EndReason.REFUSED_BAD_INPUT, "an audio-in session needs the target speaker's "
                               "enrollment: 'ref_audio' with 'ref_sample_rate' and 'x_vector_only'",
                               param="ref_audio", code="missing_ref_audio"))
    event = from_api_error(refused, ErrorCode.BAD_INPUT)
    assert (event.code, event.param) == ("missing_ref_audio", "ref_audio")
    for field in ("'voice'", "registered voice", "'ref_audio'", "base64", "WAV", "'x_vector_only'", "session.update"):
        assert field in event.message, field
    assert "ref_sample_rate" not in event.message
