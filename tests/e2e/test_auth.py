"""Who may call what, against a real tritonserver and the gateway in front of it: the gateway's API keys
(`Authorization: Bearer`, 401 in OpenAI's JSON), the voice registry's writes behind an admin key (403 for an API
key), Triton's ports bound to this machine, and its repository API (load, unload, index) closed to every caller
(no key on any command line: model control goes through the registry with an admin key) while inference stays
open."""
from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from server.gateway.auth import Keys
from clients.stream import synthesize
from server.triton_launch import ADMIN_KEY_HEADER, Exposure
from clients.voices import RegistryError, call_registry
from tests.e2e.conftest import DEFAULT_PRESET, server_and_gateway

API, ADMIN = "user-key-0123", "admin-key-4567"
ALIAS = "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice"  # a peer harness's default model id (--served-model-name)
SPEECH = {"model": DEFAULT_PRESET, "input": "Keys.", "voice": "tiny", "response_format": "pcm",
          "seed": 1, "max_audio_seconds": 0.4, "ignore_eos": True}


@pytest.fixture(scope="module")
def locked(model_cache, tmp_path_factory):
    with server_and_gateway(tmp_path_factory, {"exposure": Exposure(admin_key=ADMIN)}, served_model_names=(ALIAS,),
                            keys=Keys(api=frozenset({API}), admin=frozenset({ADMIN}))) as both:
        yield both


def call(url: str, method: str = "GET", body: dict | None = None, key: str | None = None,
         headers: dict | None = None) -> tuple[int, dict, bytes]:
    request = urllib.request.Request(url, method=method, data=None if body is None else json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json", **(headers or {})})
    if key is not None:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def error_code(body: bytes) -> str | None:
    return json.loads(body)["error"]["code"]


def test_the_gateway_answers_only_a_known_key_and_probes_stay_open(locked):
    _, gateway = locked
    status, headers, body = call(gateway.url + "/v1/models")
    assert (status, error_code(body)) == (401, "missing_api_key") and headers["WWW-Authenticate"].startswith("Bearer")
    status, _, body = call(gateway.url + "/v1/models", key="not-a-key-at-all")
    assert (status, error_code(body)) == (401, "invalid_api_key")
    assert call(gateway.url + "/v1/models", key=API)[0] == 200
    status, headers, audio = call(gateway.url + "/v1/audio/speech", "POST", SPEECH, key=API)
    assert status == 200 and len(audio) == 5 * 1920 * 2  # 0.4 s: 5 frames of 16-bit PCM
    status, _, body = call(gateway.url + "/v1/audio/speech", "POST", SPEECH)
    assert (status, error_code(body)) == (401, "missing_api_key")
    assert call(gateway.url + "/health")[0] == 200 and call(gateway.url + "/metrics")[0] == 200


def test_registry_writes_need_the_admin_key_and_reads_an_api_key(locked):
    _, gateway = locked
    status, _, body = call(gateway.url + "/v1/audio/voices/nobody", "DELETE", key=API)
    assert (status, error_code(body)) == (403, "admin_key_required")
    status, _, body = call(gateway.url + "/v1/audio/voices", "POST", {}, key=API)
    assert (status, error_code(body)) == (403, "admin_key_required")
    status, _, body = call(gateway.url + "/v1/audio/voices/nobody", "DELETE", key=ADMIN)
    assert (status, error_code(body)) == (404, "voice_not_found")  # past the door: the registry's own answer
    assert call(gateway.url + "/v1/audio/voices", key=API)[0] == 200


def test_registry_writes_straight_through_triton_need_the_admin_key(locked):
    """Anyone who reaches Triton's port (the Helm chart exposes it to the gateway pods) cannot write voices
    without the admin key; reads stay open. The gateway sends its own key (the DELETE above got past it)."""
    srv, _ = locked
    with pytest.raises(RegistryError) as caught:
        call_registry(srv.grpc_url, "delete", name="nobody")
    assert (caught.value.ended.param, caught.value.ended.code) == ("admin_key", "admin_key_required")
    with pytest.raises(RegistryError) as caught:
        call_registry(srv.grpc_url, "delete", admin_key=API, name="nobody")
    assert caught.value.ended.code == "admin_key_required"
    with pytest.raises(RegistryError) as caught:
        call_registry(srv.grpc_url, "delete", admin_key=ADMIN, name="nobody")
    assert caught.value.ended.code == "voice_not_found"  # past the check: the registry's own answer
    assert call_registry(srv.grpc_url, "list")["object"] == "list"


def test_triton_listens_on_this_machine_only(locked):
    srv, _ = locked
    bound = _listening_addresses()
    for port in (srv.config.ports.http, srv.config.ports.grpc, srv.config.ports.metrics):
        assert bound.get(port) == "127.0.0.1", (port, bound.get(port))


def test_tritons_control_apis_are_closed_to_every_key_and_inference_is_open(locked):
    """Closed by a header value no request can carry (a line break): the admin key opens them no more."""
    srv, _ = locked
    for headers in ({}, {ADMIN_KEY_HEADER: ADMIN}):
        status, _, body = call(srv.http_url + "/v2/repository/models/voice_registry/unload", "POST", {},
                               headers=headers)
        assert status in (401, 403) and ADMIN_KEY_HEADER in body.decode()
        assert call(srv.http_url + "/v2/repository/index", "POST", {}, headers=headers)[0] in (401, 403)
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    with pytest.raises(InferenceServerException, match=ADMIN_KEY_HEADER):
        client.unload_model("voice_registry", headers={ADMIN_KEY_HEADER: ADMIN})
    assert client.is_model_ready("voice_registry")  # still loaded
    assert synthesize(srv.grpc_url, "Still open.", seed=2, max_audio_seconds=0.4, ignore_eos=True).audio.size


def test_models_load_and_unload_through_the_registry_with_an_admin_key_only(locked):
    srv, _ = locked
    for key in (None, API):
        with pytest.raises(RegistryError) as caught:
            call_registry(srv.grpc_url, "unload_model", admin_key=key, name="voice_encoder")
        assert caught.value.ended.code == "admin_key_required"
    assert call_registry(srv.grpc_url, "unload_model", admin_key=ADMIN, name="voice_encoder")["ready"] is False
    assert call_registry(srv.grpc_url, "load_model", admin_key=ADMIN, name="voice_encoder")["ready"] is True
    with pytest.raises(RegistryError) as caught:
        call_registry(srv.grpc_url, "load_model", admin_key=ADMIN, name="no_such_model")
    assert caught.value.ended.code == "model_control_failed"


def test_no_key_is_on_the_command_line_of_any_process_the_server_starts(locked):
    """`/proc/PID/cmdline` is any local user's to read: tritonserver, each stub and the gateway carry no key there;
    the server's control key sits in a file only its user reads."""
    srv, gateway = locked
    secrets = (API, ADMIN, srv.control_key)
    pids = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _session(int(p.name)) ==
            srv.process.process.pid] + [gateway.process.pid]
    assert len(pids) >= 8  # tritonserver, its seven stubs, the gateway
    for pid in pids:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        assert not any(secret in cmdline for secret in secrets), (pid, cmdline[:300])
    key_file = srv.run_dir / "control_key"
    assert key_file.read_text().strip() == srv.control_key and key_file.stat().st_mode & 0o077 == 0


def _session(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def _listening_addresses() -> dict[int, str]:
    """port -> the address a socket listens on (state 0A: LISTEN), from /proc/net/tcp and tcp6; an IPv4-mapped
    IPv6 address (gRPC's ::ffff:127.0.0.1) as its IPv4 address."""
    found = {}
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            if state == "0A":
                address, port = local.split(":")
                found[int(port, 16)] = _address(bytes.fromhex(address))
    return found


def _address(raw: bytes) -> str:
    """/proc/net's hex address (32-bit words in host order, little-endian here) as text."""
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    if len(words) == 16 and words[:12] == bytes(10) + b"\xff\xff":
        words = words[12:]
    return ".".join(map(str, words)) if len(words) == 4 else words.hex()


def test_a_served_model_name_answers_as_the_model(locked):
    _, gateway = locked
    status, _, body = call(gateway.url + "/v1/models", key=API)
    assert status == 200 and [m["id"] for m in json.loads(body)["data"]][:2] == [DEFAULT_PRESET, ALIAS]
    status, _, audio = call(gateway.url + "/v1/audio/speech", "POST", {**SPEECH, "model": ALIAS}, key=API)
    assert status == 200 and len(audio) == 5 * 1920 * 2
