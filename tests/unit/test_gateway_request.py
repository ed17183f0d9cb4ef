"""The gateway's request checks, error mapping and bytes on the wire (no server)."""
from __future__ import annotations

import base64
import io
import json
import struct
import wave

import numpy as np
import pytest

from audio.pcm import pcm16, wav_header, with_wav_sizes
from server.gateway.audio import audio_delta, audio_done
from server.gateway.errors import ApiError, from_ended
from server.gateway.speech import DEFAULT_RESPONSE_FORMAT, OPENAI_PCM_RATE, GatewaySpeechRequest, parse_speech
from protocol.wire import decode_error

MODELS = ("qwen3-tts-tiny",)


def body(**fields) -> dict:
    return {"model": "qwen3-tts-tiny", "input": "Hello.", "voice": "alloy", **fields}


def test_openai_voice_is_the_default_voice_and_extras_become_router_inputs():
    parsed = parse_speech(body(seed=7, temperature=0, ignore_eos=True, max_audio_seconds=2), MODELS)
    assert parsed == GatewaySpeechRequest("qwen3-tts-tiny", "Hello.", None, "mp3", "audio",
                                   {"seed": 7, "temperature": 0.0, "ignore_eos": True, "max_audio_seconds": 2.0})
    assert parse_speech(body(voice={"id": "tiny"}), MODELS).voice == "tiny"
    assert parse_speech(body(model="gpt-4o-mini-tts", response_format="pcm", stream_format="sse"), MODELS).model


@pytest.mark.parametrize("fields, status, param", [
    ({"speed": 4.5}, 400, "speed"),
    ({"speed": 0.2}, 400, "speed"),
    ({"speed": "fast"}, 400, "speed"),
    ({"speed": True}, 400, "speed"),
    ({"timestamps": "phoneme"}, 400, "timestamps"),
    ({"timestamps": True}, 400, "timestamps"),
    ({"response_format": "ogg"}, 400, "response_format"),
    ({"sample_rate": 11025}, 400, "sample_rate"),
    ({"sample_rate": "24000"}, 400, "sample_rate"),
    ({"sample_rate": True}, 400, "sample_rate"),
    ({"response_format": "opus", "sample_rate": 22050}, 400, "sample_rate"),  # libopus takes 8/16/24/48 kHz
    ({"stream_format": "chunks"}, 400, "stream_format"),
    ({"language": 7}, 400, "language"),
    ({"language": "\ud800"}, 400, "language"),
    ({"stream": "true"}, 400, "stream"),  # JSON's true only, not a string that says it
    ({"stream": 1}, 400, "stream"),
    ({"stream": False, "stream_format": "sse"}, 400, "stream_format"),  # events, or one whole file: not both
    ({"non_streaming_mode": "false"}, 400, "non_streaming_mode"),
    ({"task_type": "CustomVoice"}, 400, "task_type"),  # a peer's field without a meaning here stays refused
    ({"instructions": 0}, 400, "instructions"),  # not a string: refused, not read as "no instructions"
    ({"instructions": False}, 400, "instructions"),
    ({"instructions": []}, 400, "instructions"),
    ({"input": None}, 400, "input"),
    ({"model": "tts-42"}, 404, "model"),
    ({"voice": 3}, 400, "voice"),
    ({"seed": 1.5}, 400, "seed"),
    ({"ignore_eos": 1}, 400, "ignore_eos"),
    ({"temperature": float("nan")}, 400, "temperature"),
    ({"max_audio_second": 2}, 400, "max_audio_second"),  # a typo is named, not ignored
])
def test_bad_fields_are_named(fields, status, param):
    error = parse_speech(body(**fields), MODELS)
    assert isinstance(error, ApiError) and (error.status, error.param) == (status, param)
    assert set(error.to_json()["error"]) == {"message", "type", "param", "code"}


def test_a_float_sample_rate_holding_an_integer_is_that_integer():
    assert parse_speech(body(sample_rate=16000.0), MODELS).sample_rate == 16000
    assert isinstance(parse_speech(body(sample_rate=16000.0), MODELS).sample_rate, int)


@pytest.mark.parametrize("fmt", ["wav", "pcm", "mp3", "opus", "aac", "flac"])
def test_every_openai_format_is_accepted_at_every_rate_it_carries(fmt):
    for rate in (8000, 16000, 24000, 48000) + (() if fmt == "opus" else (22050, 44100)):
        parsed = parse_speech(body(response_format=fmt, sample_rate=rate), MODELS)
        assert (parsed.response_format, parsed.sample_rate) == (fmt, rate)


def test_openai_s_defaults_mp3_when_no_format_is_named_and_pcm_at_24_khz():
    """OpenAI's defaults: no `response_format` is mp3; `pcm` (headerless, played at 24 kHz unread) comes at
    OPENAI_PCM_RATE whatever the model's rate unless `sample_rate` asks otherwise; a format with a header keeps the
    model's rate (None) unless asked."""
    assert (DEFAULT_RESPONSE_FORMAT, OPENAI_PCM_RATE) == ("mp3", 24000)
    unnamed = parse_speech(body(), MODELS)
    assert (unnamed.response_format, unnamed.sample_rate) == ("mp3", None)
    assert parse_speech(body(response_format="pcm"), MODELS).sample_rate == OPENAI_PCM_RATE
    assert parse_speech(body(response_format="pcm", sample_rate=16000), MODELS).sample_rate == 16000
    for fmt in ("wav", "mp3", "opus", "aac", "flac"):
        assert parse_speech(body(response_format=fmt), MODELS).sample_rate is None, fmt
    assert parse_speech(body(sample_rate=44100), MODELS).sample_rate == 44100  # mp3 at an asked rate
    error = parse_speech(body(response_format="mp4"), MODELS)
    assert isinstance(error, ApiError) and error.param == "response_format" and "mp3" in error.message


def test_speed_and_word_timestamps_become_router_inputs_and_their_defaults_send_nothing():
    assert parse_speech(body(speed=1, timestamps="none"), MODELS).params == {}
    parsed = parse_speech(body(speed=0.25, timestamps="word"), MODELS)
    assert parsed.params == {"speed": 0.25, "timestamps": "word"} and parsed.word_timestamps
    assert parse_speech(body(speed=4), MODELS).params == {"speed": 4.0}
    assert isinstance(parse_speech([1, 2], MODELS), ApiError)


@pytest.mark.parametrize("wire, status, param, code, retry_after", [
    ("[overloaded] server overloaded: 128 requests already wait for the LM lane; retry later", 503, None,
     "overloaded", "1"),
    ("[lane_down] the codec lane is down: its process died and it was unloaded", 503, None, "lane_down", "1"),
    ("[bad_input param=text] input 'text' is empty or whitespace only", 400, "input", None, None),
    ("[bad_input param=top_p] input 'top_p' must be in [0, 1], got 2.0", 400, "top_p", None, None),
    ("[bad_input param=voice code=unknown_voice] unknown voice 'x'; known voices: ['tiny']", 400, "voice",
     "unknown_voice", None),
    ("[internal] internal error: boom", 500, None, "internal_error", None),
    ("[internal] codec failed: codec decode failed: injected", 500, None, "internal_error", None),
    ("unexpected shape for input 'text' for model 'vox_ensemble'", 400, None, None, None),  # Triton's own
])
def test_server_errors_map_to_status_param_and_retry_by_their_reason(wire, status, param, code, retry_after):
    error = from_ended(decode_error(wire))
    assert (error.status, error.param, error.code) == (status, param, code)
    assert error.message == wire.split("] ", 1)[-1] and error.headers.get("Retry-After") == retry_after


def test_pcm16_quantises_like_the_grpc_client_and_clips():
    audio = np.array([0.0, 0.5, -0.5, 1.0, -1.0, 2.0, -3.0], dtype=np.float32)
    assert np.frombuffer(pcm16(audio), "<i2").tolist() == [0, 16383, -16383, 32767, -32767, 32767, -32767]


def test_streaming_wav_header_reads_back_with_the_wave_module():
    pcm = pcm16(np.linspace(-1, 1, 480, dtype=np.float32))
    with wave.open(io.BytesIO(wav_header(24000) + pcm)) as reader:
        assert (reader.getnchannels(), reader.getsampwidth(), reader.getframerate()) == (1, 2, 24000)
        assert reader.readframes(10_000) == pcm  # the unknown length reads to the end of the data


def test_sse_events_carry_base64_audio_and_usage():
    delta = json.loads(audio_delta(b"\x01\x02")[len(b"data: "):])
    assert delta == {"type": "speech.audio.delta", "audio": base64.b64encode(b"\x01\x02").decode()}
    done = json.loads(audio_done(6, 3)[len(b"data: "):])
    assert done["type"] == "speech.audio.done" and done["usage"]["total_tokens"] == 9


@pytest.mark.parametrize("fields, param", [
    ({"input": "\ud800"}, "input"),  # a lone surrogate: JSON can spell it, UTF-8 cannot
    ({"voice": "a\udfffb"}, "voice"),
    ({"seed": 2 ** 63}, "seed"),  # past INT64
    ({"seed": -(2 ** 63) - 1}, "seed"),
    ({"top_k": 4294967301}, "top_k"),  # past INT32: never wrapped to 5
])
def test_values_the_tensors_cannot_carry_are_bad_requests(fields, param):
    error = parse_speech(body(**fields), MODELS)
    assert isinstance(error, ApiError) and (error.status, error.param) == (400, param), error


def test_the_widest_seeds_pass():
    for seed in (2 ** 63 - 1, -(2 ** 63), 4294967297):
        assert parse_speech(body(seed=seed), MODELS).params == {"seed": seed}


@pytest.mark.parametrize("model", ["tts-1", "tts-1-hd", "gpt-4o-mini-tts", "qwen3-tts-tiny"])
def test_the_served_model_and_openais_names_are_accepted(model):
    assert parse_speech(body(model=model), MODELS).model == model


@pytest.mark.parametrize("model", ["tts-1xyz", "tts-1-hd-2", "gpt-4o-mini-tts-preview"])
def test_a_name_that_only_starts_like_openais_is_refused(model):
    error = parse_speech(body(model=model), MODELS)
    assert isinstance(error, ApiError) and (error.status, error.code) == (404, "model_not_found")


@pytest.mark.parametrize("fields", [{"response_format": "x" * 10_000}, {"x" * 10_000: 1},
                                    {"model": "m" * 10_000}, {"seed": "9" * 10_000}])
def test_errors_quote_at_most_a_short_piece_of_a_bad_value(fields):
    error = parse_speech(body(**fields), MODELS)
    assert isinstance(error, ApiError) and len(error.message) < 300, error.message[:400]


def test_a_model_answers_to_its_name_its_aliases_and_its_whole_hub_id():
    from server.gateway.catalog import model_ids
    assert model_ids("Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice", None, ("tts-qwen",)) == (
        "Qwen3-TTS-12Hz-1.7B-CustomVoice", "tts-qwen", "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice")
    assert model_ids("qwen3-tts-tiny", None, ()) == ("qwen3-tts-tiny",)  # a preset keeps its name
    assert model_ids("/models/ckpt", "mine", ("a", "mine")) == ("mine", "a", "ckpt")  # a path is no id
    ids = model_ids("qwen3-tts-tiny", None, ("Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice",))
    assert parse_speech(body(model="Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice"), ids).model


def test_voxlane_serve_hands_several_served_model_names_to_its_gateway(monkeypatch):
    """`voxlane serve --served-model-name A --served-model-name B`: each answers as the model, the preset too."""
    import argparse

    from server.cli import _add_serve, _fleet_config
    from server.fleet import Fleet
    from server.gateway.auth import ADMIN_KEYS_ENV, API_KEYS_ENV
    from server.gateway.catalog import model_ids

    for name in (API_KEYS_ENV, ADMIN_KEYS_ENV):
        monkeypatch.delenv(name, raising=False)
    parser = argparse.ArgumentParser()
    _add_serve(parser)
    hub_id = "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice"
    args = parser.parse_args(["--gateway-port", "9000", "--served-model-name", "tts-qwen",
                              "--served-model-name", hub_id])
    config = Fleet(_fleet_config(args)).gateway_config()
    assert config.served_model_names == ("tts-qwen", hub_id)
    ids = model_ids(args.model, None, config.served_model_names)
    assert ids == (args.model, "tts-qwen", hub_id)
    assert all(parse_speech(body(model=i), ids).model == i for i in ids)


def test_the_peers_fields_become_router_inputs_and_stream_false_asks_for_one_file():
    """The public harness's request shape (model, input, voice, language, stream, non_streaming_mode,
    response_format, stream_format) parses; `language` and `non_streaming_mode` go to the router as given."""
    request = parse_speech(body(voice="Ryan", language="English", stream=True, non_streaming_mode=False,
                                response_format="pcm", stream_format="audio"), MODELS)
    assert request.params == {"language": "English", "non_streaming_mode": False}
    assert (request.voice, request.is_streamed, request.stream_format) == ("Ryan", True, "audio")
    assert parse_speech(body(), MODELS).is_streamed  # no `stream`: OpenAI's chunked response, as before
    assert not parse_speech(body(stream=False), MODELS).is_streamed


def test_instructions_go_to_the_server_and_empty_ones_are_none():
    assert parse_speech(body(instructions="Speak softly."), MODELS).params == {"instructions": "Speak softly."}
    assert parse_speech(body(instructions="", language=" "), MODELS).params == {}  # OpenAI's SDK sends ""


def test_a_whole_wav_file_gets_its_sizes():
    pcm = bytes(range(10)) * 4
    whole = with_wav_sizes(wav_header(24000) + pcm)
    with wave.open(io.BytesIO(whole)) as read:
        assert (read.getframerate(), read.readframes(read.getnframes())) == (24000, pcm)
    assert struct.unpack("<I", whole[4:8])[0] == len(whole) - 8


def test_the_documented_sse_example_is_the_tested_code():
    """docs/GATEWAY.md shows clients/speech_sse.py's example, which tests/e2e/test_timestamps_speed.py runs."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    source = (root / "clients/speech_sse.py").read_text()
    example = re.search(r"# example: begin\n(.*?)# example: end\n", source, re.S).group(1)
    assert example in (root / "docs/GATEWAY.md").read_text(), "docs/GATEWAY.md does not show the example"
