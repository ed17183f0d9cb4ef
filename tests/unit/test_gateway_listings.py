"""What UIs read to fill their menus, without a server: `GET /v1/audio/models` and `GET /v1/audio/voices` (the
registries' answers faked); the registered voices' own list (`?registered=true`) is the answer it always was."""
from __future__ import annotations

import asyncio

import pytest
from aiohttp.test_utils import TestClient, TestServer

from server.gateway import service
from server.gateway.app import build_app
from server.gateway.config import GatewayConfig
from server.gateway.errors import unavailable
from server.gateway.listings import audio_models_json, preset_voices, voice_listing
from server.gateway.speech import OPENAI_VOICES, served_models
from server.gateway.voices import merged_list

MODELS = ("qwen3-tts-tiny",)
ALICE = {"name": "alice", "transcript": None, "x_vector_only": True, "sample_rate": 16000, "duration_s": 1.5,
         "created": 1.0}
ANSWER = {"object": "list", "data": [ALICE], "presets": ["tiny", "tiny_b", "vivian"]}


def test_audio_models_lists_every_id_a_request_may_name_for_both_readers():
    listed = audio_models_json(served_models(MODELS))
    ids = ["qwen3-tts-tiny", "tts-1", "tts-1-hd", "gpt-4o-mini-tts"]
    assert [m["id"] for m in listed["models"]] == ids and all(m["name"] == m["id"] for m in listed["models"])
    assert [(m["id"], m["object"]) for m in listed["data"]] == [(i, "model") for i in ids]


def test_the_voice_listing_has_presets_registered_voices_and_openai_names_under_both_keys():
    listed = voice_listing(merged_list([ANSWER]), [ANSWER])
    assert listed["data"] == listed["voices"] and listed["object"] == "list"
    entries = {v["id"]: v for v in listed["data"]}
    assert [v["id"] for v in listed["data"]] == ["tiny", "tiny_b", "vivian", "alice", *OPENAI_VOICES]
    assert all(v["name"] == v["id"] for v in listed["data"])
    assert (entries["vivian"]["registered"], entries["vivian"]["kind"]) == (False, "preset")
    assert (entries["alloy"]["registered"], entries["alloy"]["kind"]) == (False, "openai")
    assert entries["alice"] == {"object": "voice", **ALICE, "id": "alice", "registered": True, "kind": "registered"}


def test_presets_come_from_every_server_that_named_them_and_none_while_no_lm_lane_answered():
    assert preset_voices([{"data": []}, {"data": [], "presets": ["a", "b"]}, {"data": [], "presets": ["b", "c"]}]) \
        == ["a", "b", "c"]
    without = voice_listing(merged_list([{"object": "list", "data": []}]), [{"object": "list", "data": []}])
    assert [v["id"] for v in without["voices"]] == list(OPENAI_VOICES)  # still a menu: OpenAI's names


def listing_gateway(monkeypatch, answers: list) -> service.Gateway:
    calls = []

    async def call_voice_registry(self, proto):
        calls.append(proto)
        return answers

    monkeypatch.setattr(service.Gateway, "call_voice_registry", call_voice_registry)
    gateway = service.Gateway(GatewayConfig())
    gateway.model_ids = MODELS
    gateway.calls = calls
    return gateway


def get_json(gateway: service.Gateway, path: str) -> tuple[int, dict]:
    async def run():
        async with TestClient(TestServer(build_app(gateway))) as client:
            response = await client.get(path)
            return response.status, await response.json()
    return asyncio.run(run())


def test_get_voices_answers_the_listing_and_registered_true_the_registered_voices_as_before(monkeypatch):
    gateway = listing_gateway(monkeypatch, [ANSWER])
    status, listed = get_json(gateway, "/v1/audio/voices")
    assert status == 200 and [v["id"] for v in listed["voices"]][:4] == ["tiny", "tiny_b", "vivian", "alice"]
    status, registered = get_json(gateway, "/v1/audio/voices?registered=true")
    assert (status, registered) == (200, {"object": "list", "data": [{"object": "voice", **ALICE}]})
    assert get_json(gateway, "/v1/audio/voices?registered=false")[1] == listed
    status, error = get_json(gateway, "/v1/audio/voices?registered=maybe")
    assert (status, error["error"]["param"]) == (400, "registered")


@pytest.mark.parametrize("answers, status", [([], 503), ([unavailable("a registry did not answer")], 503)])
def test_get_voices_without_a_registry_is_a_503_as_before(monkeypatch, answers, status):
    assert get_json(listing_gateway(monkeypatch, answers), "/v1/audio/voices")[0] == status


def test_get_audio_models_is_a_route(monkeypatch):
    status, listed = get_json(listing_gateway(monkeypatch, []), "/v1/audio/models")
    assert status == 200 and listed == audio_models_json(served_models(MODELS))
