"""What UIs read to fill their menus: `GET /v1/audio/models` and `GET /v1/audio/voices` (docs/GATEWAY.md).

Web UIs list TTS models from `/v1/audio/models` as `{"models": [{"id"}]}` (falling back to `tts-1` where it is
missing); OpenAI-style readers take `data`. Voice menus read `{"voices": [{"id", "name"}]}`, OpenAI-style ones
`data`: the voice listing has both keys, holding the same entries: the model's preset voices (as its LM lane names
them, through each server's voice registry), the registered voices (each its registry record as before, plus `id`,
`registered` and `kind`), then OpenAI's voice names, which the gateway speaks in the model's default voice.
"""
from __future__ import annotations

from server.gateway.speech import OPENAI_VOICES

PRESET, REGISTERED, OPENAI = "preset", "registered", "openai"  # an entry's `kind`


def model_json(name: str) -> dict:
    return {"id": name, "object": "model", "created": 0, "owned_by": "voxlane"}


def audio_models_json(names: tuple[str, ...]) -> dict:
    """The model ids a request may name, the served model's first."""
    return {"object": "list", "models": [{"id": name, "name": name} for name in names],
            "data": [model_json(name) for name in names]}


def voice_listing(registered: dict, answers: list[dict]) -> dict:
    """Every voice a request may name: `registered` is the registered voices' list (voices.merged_list), `answers`
    the registries' own answers, whose `presets` name the model's preset voices (absent where a server's LM lane
    has not answered yet)."""
    entries = [*(_entry(name, PRESET) for name in preset_voices(answers)),
               *({**voice, "id": voice["name"], "registered": True, "kind": REGISTERED} for voice in registered["data"]),
               *(_entry(name, OPENAI) for name in OPENAI_VOICES)]
    unique: dict[str, dict] = {}
    for entry in entries:
        unique.setdefault(entry["id"], entry)  # ids are unique: the first entry of an id is listed
    return {"object": "list", "data": list(unique.values()), "voices": list(unique.values())}


def preset_voices(answers: list[dict]) -> list[str]:
    """The preset voices the servers name, in the first server's order (all serve the same model)."""
    names: dict[str, None] = {}
    for answer in answers:
        names.update(dict.fromkeys(answer.get("presets", ())))
    return list(names)


def _entry(name: str, kind: str) -> dict:
    return {"object": "voice", "id": name, "name": name, "registered": False, "kind": kind}
