"""The voice registry (issue 17) against real tritonservers serving qwen3-tts-tiny-base and a gateway in front
of two of them (each with its own data directory): register through Triton's `voice_registry` and through
`POST /v1/audio/voices`, list, speak with a registered voice (the same audio as its reference inline, same seed),
find it again on a server started afresh on the same data directory, delete, and clear refusals of bad uploads.
The reference audio is synthesised here (tests/reference_audio.py); no audio files are committed."""
from __future__ import annotations

import base64
import io
import itertools
import json
import os
import signal
import subprocess
import sys
import time
import wave

import httpx
import numpy as np
import openai
import pytest

from server.compare import free_ports
from server.gateway.config import GatewayConfig
from server.gateway.server import GatewayProcess
from server.procstats import server_processes
from clients.stream import StreamError, synthesize
from clients.voices import RegistryError, call_registry
from protocol.reasons import EndReason
from protocol.wire import decode_error
from tests.audio_decode import assert_same_pcm16
from tests.e2e.conftest import start_server
from tests.e2e.test_text_stream import assert_same_audio
from tests.reference_audio import voiced

BASE_PRESET = "qwen3-tts-tiny-base"
TEXT = "Get the trust fund to the bank early."
RATE = 16000
REFERENCE = voiced(2.0, RATE, f0=140.0)
OTHER_REFERENCE = voiced(2.0, RATE, f0=260.0)
REF_TEXT = "A reference sentence, read aloud."
SPEECH = dict(seed=7, max_audio_seconds=0.8, ignore_eos=True)  # 10 frames: chunks of 2, 4, 4
CLONES = {"in_context": dict(ref_text=REF_TEXT), "x_vector": dict(x_vector_only=True)}


@pytest.fixture(scope="module")
def data_dirs(tmp_path_factory):
    return tmp_path_factory.mktemp("data-a"), tmp_path_factory.mktemp("data-b")


@pytest.fixture(scope="module")
def servers(model_cache, tmp_path_factory, data_dirs):
    """Two servers of the Base preset, each with its own data directory (as on two hosts)."""
    from backend_python.models import registry
    if BASE_PRESET not in registry.preset_names():
        pytest.skip(f"the {BASE_PRESET} preset is not in the registry")
    started = []
    try:
        for data_dir in data_dirs:
            started.append(start_server(BASE_PRESET, tmp_path_factory, data_dir=str(data_dir)))
        yield started
    finally:
        for server in started:
            server.stop(grace_s=0)


@pytest.fixture(scope="module")
def url(servers) -> str:
    return servers[0].grpc_url


@pytest.fixture(scope="module")
def gateway(servers, tmp_path_factory):
    config = GatewayConfig(tritons=tuple(s.grpc_url for s in servers), port=free_ports(1)[0])
    process = GatewayProcess(config, log_path=tmp_path_factory.mktemp("gateway") / "gateway.log")
    process.wait_ready(60)
    yield process
    process.stop()


def registry(url: str, action: str, **values):
    """One call to `voice_registry` (clients/voices.py, tritonclient): its JSON answer, or its refusal's `Ended`."""
    try:
        return call_registry(url, action, **values)
    except RegistryError as exc:
        return exc.ended


def register(url: str, name: str, reference: np.ndarray = REFERENCE, **clone):
    return registry(url, "register", name=name, ref_audio=reference, ref_sample_rate=RATE, **clone)


def inline(url: str, reference: np.ndarray = REFERENCE, **clone):
    return synthesize(url, TEXT, ref_audio=reference, ref_sample_rate=RATE, **clone, **SPEECH)


def refused(answer, param, code, reason=EndReason.REFUSED_BAD_INPUT) -> None:
    assert not isinstance(answer, dict), answer
    assert (answer.reason, answer.param, answer.code) == (reason, param, code), answer


@pytest.mark.parametrize("kind", CLONES)
def test_a_voice_registered_through_triton_speaks_as_its_reference_inline(url, kind):
    name = f"triton-{kind}"
    voice = register(url, name, **CLONES[kind])
    assert voice["name"] == name and voice["x_vector_only"] == (kind == "x_vector")
    assert voice["transcript"] == (REF_TEXT if kind == "in_context" else None)
    assert (voice["sample_rate"], voice["duration_s"]) == (RATE, 2.0)
    named = synthesize(url, TEXT, voice=name, **SPEECH)
    assert [c.index for c in named.chunks] == [0, 1, 2] and named.audio.size == 10 * 1920
    assert_same_audio(named, inline(url, **CLONES[kind]))
    # the stored voice is what speaks: the other way of cloning the same reference sounds otherwise (and a Base
    # model refuses a request with no voice to clone at all)
    other = inline(url, **CLONES["x_vector" if kind == "in_context" else "in_context"])
    assert not np.allclose(named.audio, other.audio, atol=1e-3)


def test_list_and_delete_through_triton(url):
    register(url, "to-delete", x_vector_only=True)
    assert "to-delete" in [v["name"] for v in registry(url, "list")["data"]]
    deleted = registry(url, "delete", name="to-delete")
    assert (deleted["name"], deleted["deleted"]) == ("to-delete", True)
    assert "to-delete" not in [v["name"] for v in registry(url, "list")["data"]]
    refused(registry(url, "delete", name="to-delete"), "name", "voice_not_found")
    with pytest.raises(StreamError) as unknown:  # neither a preset nor registered now: the model's own refusal
        synthesize(url, TEXT, voice="to-delete", **SPEECH)
    ended = unknown.value.ended
    assert (ended.reason, ended.param, ended.code) == (EndReason.REFUSED_BAD_INPUT, "voice", "unknown_voice")


@pytest.mark.parametrize("values, param, code", [
    (dict(name="bad name", ref_audio=REFERENCE, ref_sample_rate=RATE, x_vector_only=True), "name", "bad_voice_name"),
    (dict(name="short", ref_audio=REFERENCE[:RATE // 5], ref_sample_rate=RATE, x_vector_only=True), "ref_audio",
     "ref_audio_too_short"),
    (dict(name="no-text", ref_audio=REFERENCE, ref_sample_rate=RATE), "ref_text", "missing_ref_text"),
    (dict(name="no-audio"), "ref_audio", "missing_ref_audio"),
])
def test_bad_registrations_through_triton_are_refused(url, values, param, code):
    refused(registry(url, "register", **values), param, code)
    assert values["name"] not in [v["name"] for v in registry(url, "list")["data"]]


def test_a_taken_name_is_refused_and_the_same_reference_again_answers_the_stored_voice(url):
    first = register(url, "taken", x_vector_only=True)
    assert register(url, "taken", x_vector_only=True) == first
    refused(register(url, "taken", OTHER_REFERENCE, x_vector_only=True), "name", "voice_exists")
    refused(synthesize_error(url, voice="taken", ref_audio=REFERENCE, ref_sample_rate=RATE, x_vector_only=True),
            "voice", "voice_and_reference")


def synthesize_error(url: str, **inputs):
    with pytest.raises(StreamError) as error:
        synthesize(url, TEXT, **inputs, **SPEECH)
    return error.value.ended


# ---- through the gateway --------------------------------------------------------------------------------------

def wav_file(audio: np.ndarray, rate: int = RATE) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(np.round(audio * 32767).astype("<i2").tobytes())
    return buffer.getvalue()


def upload(gateway, name: str, data: bytes, **fields) -> httpx.Response:
    return httpx.post(gateway.url + "/v1/audio/voices", files={"file": ("reference.wav", data, "audio/wav")},
                      data={"name": name, **fields}, timeout=60)


def speak_sse(gateway, **fields) -> tuple[np.ndarray, list[str]]:
    """16-bit PCM of one SSE speech request, and each chunk's lane."""
    body = {"model": BASE_PRESET, "input": TEXT, "response_format": "pcm", "stream_format": "sse", **SPEECH, **fields}
    response = httpx.post(gateway.url + "/v1/audio/speech", json=body, timeout=60)
    assert response.status_code == 200, response.text
    events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
    deltas = [e for e in events if e["type"] == "speech.audio.delta"]
    assert events[-1]["type"] == "speech.audio.done"
    pcm = b"".join(base64.b64decode(e["audio"]) for e in deltas)
    return np.frombuffer(pcm, "<i2"), [e["lane"] for e in deltas if "lane" in e]


def test_a_voice_registered_through_the_gateway_reaches_every_server_and_speaks_as_inline(gateway, servers):
    response = upload(gateway, "gw-voice", wav_file(REFERENCE), transcript=REF_TEXT)
    assert response.status_code == 200, response.text
    voice = response.json()
    assert (voice["object"], voice["name"], voice["transcript"], voice["sample_rate"]) == (
        "voice", "gw-voice", REF_TEXT, RATE)
    for server in servers:  # each has it in its own data directory
        assert "gw-voice" in [v["name"] for v in registry(server.grpc_url, "list")["data"]]
    listed = httpx.get(gateway.url + "/v1/audio/voices?registered=true", timeout=30).json()
    assert listed["object"] == "list" and "gw-voice" in [v["name"] for v in listed["data"]]
    menu = httpx.get(gateway.url + "/v1/audio/voices", timeout=30).json()  # every voice a request may name
    entry = next(v for v in menu["voices"] if v["id"] == "gw-voice")
    assert entry == {**next(v for v in listed["data"] if v["name"] == "gw-voice"), "id": "gw-voice",
                     "registered": True, "kind": "registered"}
    assert menu["data"] == menu["voices"] and not [v for v in menu["voices"] if v["kind"] == "preset"]  # Base: none
    assert {v["id"] for v in menu["voices"] if v["kind"] == "openai"} >= {"alloy", "nova"}
    named, _ = speak_sse(gateway, voice="gw-voice")
    reference = base64.b64encode(wav_file(REFERENCE)).decode()
    inline_pcm, _ = speak_sse(gateway, ref_audio=reference, ref_text=REF_TEXT)
    assert named.size == 10 * 1920
    assert_same_pcm16(named, inline_pcm)


def test_the_openai_sdk_speaks_with_a_registered_voice(gateway):
    assert upload(gateway, "sdk-voice", wav_file(REFERENCE), x_vector_only="true").status_code == 200
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0, timeout=60)
    audio = client.audio.speech.create(model=BASE_PRESET, voice="sdk-voice", input=TEXT, response_format="pcm",
                                       extra_body=SPEECH).content
    reference = base64.b64encode(wav_file(REFERENCE)).decode()
    inline_pcm, _ = speak_sse(gateway, ref_audio=reference, x_vector_only=True)
    assert_same_pcm16(np.frombuffer(audio, "<i2"), inline_pcm)


@pytest.mark.parametrize("name, data, fields, status, param, code", [
    ("not-audio", b"this is plain text, not audio", {}, 400, "file", "invalid_audio"),
    ("too-short", wav_file(REFERENCE[:RATE // 5]), {"x_vector_only": "true"}, 400, "file", "ref_audio_too_short"),
    ("bad name", wav_file(REFERENCE), {"x_vector_only": "true"}, 400, "name", "bad_voice_name"),
    ("alloy", wav_file(REFERENCE), {"x_vector_only": "true"}, 400, "name", "reserved_voice_name"),
    ("no-text", wav_file(REFERENCE), {}, 400, "transcript", "missing_ref_text"),
], ids=["not-audio", "too-short", "bad-name", "openai-name", "no-transcript"])
def test_bad_uploads_get_clear_errors(gateway, name, data, fields, status, param, code):
    response = upload(gateway, name, data, **fields)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert (error["param"], error["code"], error["type"]) == (param, code, "invalid_request_error"), error
    assert error["message"]
    listed = httpx.get(gateway.url + "/v1/audio/voices?registered=true", timeout=30).json()["data"]
    assert name not in [v["name"] for v in listed]


def many_channels_wav(audio: np.ndarray, channels: int) -> bytes:
    """The reference on every one of `channels` channels (their mean is the reference again)."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(channels)
        out.setsampwidth(2)
        out.setframerate(RATE)
        out.writeframes(np.repeat(np.round(audio * 32767).astype("<i2")[:, None], channels, axis=1).tobytes())
    return buffer.getvalue()


def test_hostile_reference_files_get_answers_and_the_gateway_lives_on(gateway):
    """An 8-channel WAV crashed the gateway's decoder; a small FLAC whose header says 700 s was decoded whole
    before its length was checked. Now: the first registers as its mono mean, the second is a 400 at once."""
    import soundfile

    response = upload(gateway, "eight-channels", many_channels_wav(REFERENCE, 8), x_vector_only="true")
    assert response.status_code == 200, response.text
    reference = base64.b64encode(many_channels_wav(REFERENCE[:RATE], 16)).decode()  # 1 s: under the body limit
    pcm, _ = speak_sse(gateway, ref_audio=reference, x_vector_only=True)
    assert pcm.size == 10 * 1920
    bomb = io.BytesIO()
    soundfile.write(bomb, np.zeros(700 * 8_000, np.int16), 8_000, format="FLAC")
    response = upload(gateway, "bomb", bomb.getvalue(), x_vector_only="true")
    assert response.status_code == 400, response.text
    assert (response.json()["error"]["param"], response.json()["error"]["code"]) == ("file", "audio_too_long")
    assert httpx.get(gateway.url + "/health", timeout=10).status_code == 200


def test_delete_through_the_gateway_and_a_taken_name(gateway, servers):
    assert upload(gateway, "gw-delete", wav_file(REFERENCE), x_vector_only="true").status_code == 200
    taken = upload(gateway, "gw-delete", wav_file(OTHER_REFERENCE), x_vector_only="true")
    assert taken.status_code == 409 and taken.json()["error"]["code"] == "voice_exists"
    deleted = httpx.delete(gateway.url + "/v1/audio/voices/gw-delete", timeout=30)
    assert deleted.status_code == 200 and deleted.json() == {"object": "voice", "name": "gw-delete", "deleted": True}
    for server in servers:
        assert "gw-delete" not in [v["name"] for v in registry(server.grpc_url, "list")["data"]]
    again = httpx.delete(gateway.url + "/v1/audio/voices/gw-delete", timeout=30)
    assert again.status_code == 404 and again.json()["error"]["code"] == "voice_not_found"
    gone = httpx.post(gateway.url + "/v1/audio/speech", json={"model": BASE_PRESET, "input": TEXT,
                                                                "voice": "gw-delete", **SPEECH}, timeout=60)
    assert gone.status_code == 400 and gone.json()["error"]["code"] == "unknown_voice"


def import_voice(url: str, name: str, data: bytes) -> dict:
    """`voice_registry`'s import of a voice's file, as the gateway sends it to a server that lacks the voice."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException
    inputs = []
    for key, value in (("action", b"import"), ("name", name.encode()), ("voice_file", data)):
        tensor = grpcclient.InferInput(key, [1], "BYTES")
        tensor.set_data_from_numpy(np.array([value], dtype=np.object_))
        inputs.append(tensor)
    client = grpcclient.InferenceServerClient(url)
    try:
        return json.loads(client.infer("voice_registry", inputs).as_numpy("voices")[0])
    except InferenceServerException as exc:
        raise RegistryError(decode_error(exc.message())) from None
    finally:
        client.close()


def voice_file(tensors: dict, transcript: str | None = REF_TEXT, x_vector_only: bool = False,
               meta_pad: int = 0) -> bytes:
    from backend_python.voice_registry.store import META, Voice, _encoded
    voice = Voice("v", tensors, transcript, x_vector_only, RATE, 2.0, 1, "f" * 64)
    if not meta_pad:
        return _encoded(voice)
    meta = {**voice.metadata(), "duration_s": 2.0, "fingerprint": "f" * 64, "pad": "x" * meta_pad}
    buffer = io.BytesIO()
    np.savez(buffer, **tensors, **{META: np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)})
    return buffer.getvalue()


def test_an_imported_voice_the_model_cannot_speak_is_refused_and_never_listed(url):
    """Each of these was stored, listed and copied to other servers, then failed every request that named it."""
    from backend_python.models import registry
    spec = registry.load_voice_encoder(registry.resolve(BASE_PRESET), "cpu", "float32").voice_spec()
    (dim,), (_, num_codebooks), limit = spec.shapes["speaker_embedding"], spec.shapes["ref_codes"], spec.code_limits[0]
    embedding, codes = np.zeros(dim, np.float32), np.zeros((20, num_codebooks), np.int64)
    unusable = {
        "an embedding of 3": voice_file({"speaker_embedding": np.zeros(3, np.float32)}, x_vector_only=True),
        "an embedding one short": voice_file({"speaker_embedding": np.zeros(dim - 1, np.float32)}, x_vector_only=True),
        "an embedding of 8192": voice_file({"speaker_embedding": np.zeros(8192, np.float32)}, x_vector_only=True),
        "codes of a codebook more": voice_file({"speaker_embedding": embedding,
                                                "ref_codes": np.zeros((20, num_codebooks + 1), np.int64)}),
        "codes past the codebook": voice_file({"speaker_embedding": embedding, "ref_codes": codes + limit}),
        "in context, no transcript": voice_file({"speaker_embedding": embedding, "ref_codes": codes}, transcript=None),
        "a control character": voice_file({"speaker_embedding": embedding, "ref_codes": codes}, transcript="a\x07"),
        "a 50k transcript": voice_file({"speaker_embedding": embedding, "ref_codes": codes}, transcript="w" * 50_000),
        "5 MB of metadata": voice_file({"speaker_embedding": embedding, "ref_codes": codes}, meta_pad=5 << 20),
    }
    for i, (what, data) in enumerate(unusable.items()):
        with pytest.raises(RegistryError) as caught:
            import_voice(url, f"unusable-{i}", data)
        ended = caught.value.ended
        assert (ended.reason, ended.param) == (EndReason.REFUSED_BAD_INPUT, "voice_file"), (what, ended)
        assert ended.code in ("voice_mismatch", "bad_voice_file", "missing_ref_text"), (what, ended)
    assert not any(v["name"].startswith("unusable-") for v in call_registry(url, "list")["data"])
    assert import_voice(url, "usable", voice_file({"speaker_embedding": embedding, "ref_codes": codes}))["name"] == \
        "usable"
    call_registry(url, "delete", name="usable")


def _tensor(name: str, datatype: str, shape: list[int], data: list) -> dict:
    return {"name": name, "datatype": datatype, "shape": shape, "data": data}


DIRECT_BAD_INPUT = {  # a model called directly over Triton's HTTP, with input that is the caller's fault
    "voice_encoder: a rate out of range": ("voice_encoder/infer", {"inputs": [
        _tensor("ref_audio", "FP32", [1, RATE], [0.1] * RATE), _tensor("ref_sample_rate", "INT32", [1, 1], [100])]}),
    "voice_registry: an unknown action": ("voice_registry/infer", {"inputs": [
        _tensor("action", "BYTES", [1], ["dance"])]}),
    "codec: codes of the wrong shape": ("codec/infer", {"inputs": [
        _tensor("codes", "INT32", [1, 3, 16], [99_999] * 48), _tensor("context_frames", "INT32", [1, 1], [0])]}),
    "speechlm_lm: a temperature out of range": ("speechlm_lm/generate", {"text": "Hi.", "temperature": -5.0}),
    "vox_ensemble: an empty text": ("vox_ensemble/generate", {"text": " "}),
}


@pytest.mark.parametrize("path, body", DIRECT_BAD_INPUT.values(), ids=DIRECT_BAD_INPUT)
def test_every_model_answers_bad_input_over_http_with_a_400_and_its_reason(servers, path, body):
    """Each model's own refusal is INVALID_ARG (stub_common/responses.py): a 400 carrying the reason code, where it
    was a 500 (Triton's default code). Triton's own parser of `generate` bodies still answers a JSON object where it
    wants text with a 500 of its own, before any model runs (docs/RELIABILITY.md)."""
    response = httpx.post(f"{servers[0].http_url}/v2/models/{path}", json=body, timeout=30)
    assert response.status_code == 400, response.text
    assert response.json()["error"].startswith("[bad_input"), response.text


def test_a_server_started_afresh_on_the_same_data_directory_has_the_voices(url, data_dirs, tmp_path_factory):
    register(url, "kept", ref_text=REF_TEXT)
    before = synthesize(url, TEXT, voice="kept", **SPEECH)
    restarted = start_server(BASE_PRESET, tmp_path_factory, data_dir=str(data_dirs[0]))
    try:
        assert "kept" in [v["name"] for v in registry(restarted.grpc_url, "list")["data"]]
        assert_same_audio(synthesize(restarted.grpc_url, TEXT, voice="kept", **SPEECH), before)
    finally:
        restarted.stop(grace_s=0)


def test_voxlane_voices_registers_lists_and_deletes_through_triton(url, tmp_path):
    reference = tmp_path / "me.wav"
    reference.write_bytes(wav_file(REFERENCE))

    def voxlane(*args):
        return subprocess.run([sys.executable, "-m", "server.cli", "voices", "--url", url, *args],
                              capture_output=True, text=True, timeout=120)
    done = voxlane("register", "cli-voice", str(reference), "--transcript", REF_TEXT)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["transcript"] == REF_TEXT
    assert "cli-voice" in [v["name"] for v in json.loads(voxlane("list").stdout)]
    assert synthesize(url, TEXT, voice="cli-voice", **SPEECH).audio.size == 10 * 1920
    assert json.loads(voxlane("delete", "cli-voice").stdout)["deleted"] is True
    again = voxlane("delete", "cli-voice")
    assert again.returncode == 1 and "voice_not_found" in again.stderr
    refused = voxlane("register", "cli-voice", str(reference))  # in context, with no transcript
    assert refused.returncode == 1 and "missing_ref_text" in refused.stderr


def test_on_a_model_with_preset_voices_a_preset_s_name_is_refused_and_it_clones_none(server):
    """The default preset (CustomVoice: voices `tiny`, `tiny_b`, `vivian`, …, no voice encoder), read off the real
    model registry; a preset's name in another case too (the model takes `Ryan` as `ryan`)."""
    refused(register(server.grpc_url, "tiny", x_vector_only=True), "name", "preset_voice_name")
    refused(register(server.grpc_url, "Ryan", x_vector_only=True), "name", "preset_voice_name")
    refused(register(server.grpc_url, "mine", x_vector_only=True), "ref_audio", "reference_unsupported")
    assert registry(server.grpc_url, "list")["data"] == []


def test_a_gateway_gives_a_server_the_voices_it_lacks(servers, tmp_path_factory):
    """A voice registered on one server alone (straight through Triton, or while the other was away) reaches the
    other when a gateway sees it ready: copied as it is, so it speaks alike on both."""
    first, second = (s.grpc_url for s in servers)
    register(first, "only-on-first", ref_text=REF_TEXT)
    assert "only-on-first" not in [v["name"] for v in registry(second, "list")["data"]]
    config = GatewayConfig(tritons=(first, second), port=free_ports(1)[0])
    process = GatewayProcess(config, log_path=tmp_path_factory.mktemp("gateway-sync") / "gateway.log")
    try:
        process.wait_ready(60)
        deadline = time.monotonic() + 20
        while "only-on-first" not in [v["name"] for v in registry(second, "list")["data"]]:
            assert time.monotonic() < deadline, "the gateway did not copy the voice"
            time.sleep(0.2)
    finally:
        process.stop()
    assert_same_audio(synthesize(second, TEXT, voice="only-on-first", **SPEECH),
                      synthesize(first, TEXT, voice="only-on-first", **SPEECH))


def test_registers_while_the_encoder_reloads_are_503_until_it_serves_again(servers):
    """Last in this module: the encoder's stub is killed and registers keep coming (no speech stream meets
    it): each is refused as the lane being down (503 with Retry-After behind the gateway), never a 500 or a
    400, until the encoder serves again and one registers."""
    url, server = servers[0].grpc_url, servers[0]
    os.kill(server_processes(server.process.process.pid)["voice_encoder"], signal.SIGKILL)
    refusals, deadline = [], time.monotonic() + 90
    for attempt in itertools.count():
        answer = register(url, f"during-reload-{attempt}", ref_text=REF_TEXT)
        if isinstance(answer, dict):
            break
        refusals.append(answer)
        assert answer.reason is EndReason.LANE_DOWN, refusals
        assert time.monotonic() < deadline, f"the encoder did not come back: {refusals[-3:]}"
        time.sleep(0.1)
    assert answer["name"] == f"during-reload-{attempt}" and refusals, "no register met the dead encoder"
