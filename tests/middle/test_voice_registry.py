"""`voice_registry` in-process (fake pb_utils, a fake `voice_encoder` lane): register calls the encoder once and
stores exactly what an inline reference would hand the LM; list and delete; every refusal is a coded `Ended`."""
from __future__ import annotations

import base64
import io
import json

import numpy as np
import pytest

from protocol.reasons import Ended, EndReason
from protocol.voices import VoiceSpec
from protocol.wire import decode_error, encode_error
from tests.middle.conftest import STUB_DIED
from tests.reference_audio import voiced

RATE = 16000
AUDIO = voiced(1.5, RATE)
REF_TEXT = "A reference sentence."


class FakeEncoderLane:
    """`voice_encoder`: an embedding that depends on the audio, and codes in context; or a refusal."""

    def __init__(self, pb) -> None:
        self.pb, self.calls, self.refusal, self.is_dead, self.spec_calls = pb, [], None, False, 0

    SPEC = VoiceSpec({"speaker_embedding": (8,), "ref_codes": (-1, 16)}, (1 << 12,) * 16)  # what it makes

    def __call__(self, request, decoupled: bool):
        pb = self.pb
        assert not decoupled, "one request, one response"
        if json.loads(request.parameters() or "{}").get("voice_spec"):
            self.spec_calls += 1
            return [pb.InferenceResponse(output_tensors=[
                pb.Tensor("voice_spec", np.array([[self.SPEC.to_json().encode()]], dtype=np.object_))])]
        inputs = {t.name(): t.as_numpy() for t in request.inputs()}
        self.calls.append(inputs)
        if self.is_dead:
            return [pb.InferenceResponse(error=pb.TritonError(STUB_DIED.format(model="voice_encoder")))]
        if self.refusal is not None:
            return [pb.InferenceResponse(error=pb.TritonError(encode_error(self.refusal)))]
        audio = inputs["ref_audio"]
        outputs = [pb.Tensor("speaker_embedding", np.full((1, 8), float(audio.sum()), np.float32))]
        if not inputs["x_vector_only"].reshape(-1)[0]:
            frames = audio.shape[1] // 1920
            outputs.append(pb.Tensor("ref_codes", np.arange(frames * 16, dtype=np.int64).reshape(1, frames, 16)))
        return [pb.InferenceResponse(output_tensors=outputs)]


class FakeLMLane:
    """`speechlm_lm` as the registry meets it: `list_voices` answered with the names, or a refusal; `forget_voice`
    requests recorded (their inputs)."""

    def __init__(self, pb, voices: tuple[str, ...]) -> None:
        self.pb, self.voices, self.calls, self.error, self.forgotten = pb, voices, 0, None, []

    def __call__(self, request, decoupled: bool):
        assert decoupled, "the LM lane is decoupled"
        if forget := {t.name(): t.as_numpy() for t in request.inputs() if t.name() != "list_voices"}:
            assert forget.pop("forget_voice").tolist() == [True]
            self.forgotten.append(forget)
            return [self.pb.InferenceResponse(output_tensors=[])]
        assert [t.name() for t in request.inputs()] == ["list_voices"]
        self.calls += 1
        if self.error is not None:
            return [self.pb.InferenceResponse(error=self.pb.TritonError(self.error))]
        names = np.array([json.dumps(list(self.voices)).encode()], dtype=np.object_)
        return [self.pb.InferenceResponse(output_tensors=[self.pb.Tensor("voices", names)])]


@pytest.fixture
def registry(pb, tmp_path):
    from backend_python.voice_registry.model import VoiceRegistryModel
    pb.SERVER.reset()
    encoder = FakeEncoderLane(pb)
    pb.SERVER.handlers["voice_encoder"] = encoder
    pb.SERVER.handlers["speechlm_lm"] = FakeLMLane(pb, ("tiny", "tiny_b"))
    model = VoiceRegistryModel()
    params = {"model": "qwen3-tts-tiny-base", "data_dir": str(tmp_path), "max_cached_voices": "4"}
    model.initialize({"model_config": json.dumps(
        {"parameters": {key: {"string_value": value} for key, value in params.items()}})})
    model._presets = ("tiny",)  # the model's preset voices (read off the model registry in a server)
    model.encoder_lane = encoder
    return model


def call(pb, model, action: str | None, **inputs):
    tensors = [] if action is None else [pb.Tensor("action", np.array([action.encode()], dtype=np.object_))]
    tensors += [pb.Tensor(name, value if isinstance(value, np.ndarray)
                          else np.array([value.encode() if isinstance(value, str) else value]))
                for name, value in inputs.items()]
    response, = model.execute([pb.Request(tensors)])
    if response.has_error():
        return decode_error(response.error().message())
    return json.loads(pb.get_output_tensor_by_name(response, "voices").as_numpy()[0])


def register(pb, model, name: str, audio: np.ndarray = AUDIO, **reference):
    reference = reference or {"ref_text": REF_TEXT}
    return call(pb, model, "register", name=name, ref_audio=audio, ref_sample_rate=np.int32(RATE), **reference)


def refused(answer, param: str | None, code: str | None, reason: EndReason = EndReason.REFUSED_BAD_INPUT):
    assert isinstance(answer, Ended), answer
    assert (answer.reason, answer.param, answer.code) == (reason, param, code), answer


def test_register_stores_what_an_inline_reference_would_hand_the_lm(pb, registry):
    from backend_python.stub_common.encoder_client import VoiceEncoderClient
    from backend_python.stub_common.reference_inputs import ReferenceLimits, parse_reference
    from backend_python.voice_registry.model import _NoHealing

    answer = register(pb, registry, "alice")
    assert answer["name"] == "alice" and answer["transcript"] == REF_TEXT and answer["x_vector_only"] is False
    assert answer["sample_rate"] == RATE and answer["duration_s"] == 1.5
    registered_call, = registry.encoder_lane.calls
    inputs = {"ref_audio": AUDIO, "ref_sample_rate": np.array([RATE], np.int32),
              "ref_text": np.array([REF_TEXT.encode()], np.object_)}
    inline = VoiceEncoderClient(_NoHealing()).encode(parse_reference(inputs.get, ReferenceLimits()), {})
    inline_call = registry.encoder_lane.calls[-1]
    assert registered_call.keys() == inline_call.keys()
    for name in registered_call:  # the same encoder request
        np.testing.assert_array_equal(registered_call[name], inline_call[name])
    stored = registry.store.get("alice").lm_inputs()
    assert sorted(stored) == sorted(t.name() for t in inline)
    for tensor in inline:  # the same LM inputs, dtypes and shapes too
        np.testing.assert_array_equal(stored[tensor.name()], tensor.as_numpy())
        assert stored[tensor.name()].dtype == tensor.as_numpy().dtype


def test_an_x_vector_voice_stores_the_embedding_alone(pb, registry):
    answer = register(pb, registry, "xv", x_vector_only=np.bool_(True))
    assert answer["x_vector_only"] is True and answer["transcript"] is None
    assert set(registry.store.get("xv").lm_inputs()) == {"speaker_embedding"}


def test_list_and_delete(pb, registry):
    register(pb, registry, "bob")
    register(pb, registry, "alice", audio=AUDIO * np.float32(0.5))
    assert [v["name"] for v in call(pb, registry, "list")["data"]] == ["alice", "bob"]
    deleted = call(pb, registry, "delete", name="bob")
    assert (deleted["name"], deleted["deleted"], deleted["transcript"]) == ("bob", True, REF_TEXT)
    assert [v["name"] for v in call(pb, registry, "list")["data"]] == ["alice"]
    refused(call(pb, registry, "delete", name="bob"), "name", "voice_not_found")


def test_a_deleted_voice_is_forgotten_by_the_lm_lane_with_its_tensors(pb, registry):
    """The LM lane keys what it caches of a voice by its tensors (its prompt prefixes): a delete hands them over."""
    lm = pb.SERVER.handlers["speechlm_lm"]
    register(pb, registry, "bob", x_vector_only=np.bool_(True))
    stored = registry.store.get("bob").lm_inputs()
    call(pb, registry, "delete", name="bob")
    forgotten, = lm.forgotten
    assert forgotten.keys() == stored.keys() == {"speaker_embedding"}
    np.testing.assert_array_equal(forgotten["speaker_embedding"], stored["speaker_embedding"])
    refused(call(pb, registry, "delete", name="bob"), "name", "voice_not_found")
    assert len(lm.forgotten) == 1  # nothing deleted, nothing to forget


def test_list_names_the_model_s_preset_voices_once_the_lm_lane_answers_and_asks_it_once(pb, registry):
    lm = pb.SERVER.handlers["speechlm_lm"]
    lm.error = "Request for unknown model: 'speechlm_lm' is not found"  # still loading
    register(pb, registry, "alice")
    assert call(pb, registry, "list") == {"object": "list", "data": [call(pb, registry, "list")["data"][0]]}
    assert "presets" not in call(pb, registry, "list")  # the registered voices never wait on the LM lane
    lm.error = None
    listed = call(pb, registry, "list")
    assert listed["presets"] == ["tiny", "tiny_b"] and [v["name"] for v in listed["data"]] == ["alice"]
    calls = lm.calls
    assert call(pb, registry, "list")["presets"] == ["tiny", "tiny_b"] and lm.calls == calls  # kept, not asked again


def test_a_taken_name_is_refused_and_the_same_reference_again_is_not(pb, registry):
    first = register(pb, registry, "alice")
    assert register(pb, registry, "alice") == first  # the stored voice, not encoded again
    assert len(registry.encoder_lane.calls) == 1
    refused(register(pb, registry, "alice", audio=AUDIO * np.float32(0.5)), "name", "voice_exists")
    refused(register(pb, registry, "alice", x_vector_only=np.bool_(True)), "name", "voice_exists")
    assert len(registry.encoder_lane.calls) == 1


@pytest.mark.parametrize("name, code", [("a b", "bad_voice_name"), (".x", "bad_voice_name"),
                                        ("x" * 65, "bad_voice_name"), ("tiny", "preset_voice_name")])
def test_a_bad_name_is_refused_before_the_encoder(pb, registry, name, code):
    refused(register(pb, registry, name), "name", code)
    assert registry.encoder_lane.calls == [] and call(pb, registry, "list")["data"] == []


@pytest.mark.parametrize("reference, param, code", [
    (dict(ref_audio=AUDIO[:RATE // 10], ref_sample_rate=np.int32(RATE), ref_text=REF_TEXT), "ref_audio",
     "ref_audio_too_short"),
    (dict(ref_audio=AUDIO * np.float32(1e-5), ref_sample_rate=np.int32(RATE), ref_text=REF_TEXT), "ref_audio",
     "ref_audio_silent"),
    (dict(ref_audio=AUDIO, ref_sample_rate=np.int32(RATE)), "ref_text", "missing_ref_text"),
    (dict(ref_audio=AUDIO), "ref_sample_rate", "missing_ref_sample_rate"),
    (dict(ref_text=REF_TEXT), "ref_text", "missing_ref_audio"),
    ({}, "ref_audio", "missing_ref_audio"),
])
def test_a_bad_reference_is_refused_by_the_router_s_checks(pb, registry, reference, param, code):
    refused(call(pb, registry, "register", name="alice", **reference), param, code)
    assert registry.encoder_lane.calls == [] and registry.store.get("alice") is None


def test_bad_actions_and_inputs(pb, registry):
    refused(call(pb, registry, "rename", name="x"), "action", "unknown_action")
    refused(call(pb, registry, "list", name="x"), "name", None)
    refused(call(pb, registry, "delete", name="x", ref_audio=AUDIO), "ref_audio", None)
    refused(call(pb, registry, "delete"), "name", None)
    refused(call(pb, registry, "register", name=b"\xff"), "name", None)


def test_the_encoder_s_refusal_and_death_reach_the_client_and_nothing_is_stored(pb, registry):
    registry.encoder_lane.refusal = Ended(EndReason.REFUSED_BAD_INPUT, "model cannot take reference audio",
                                          param="ref_audio", code="reference_unsupported")
    refused(register(pb, registry, "alice"), "ref_audio", "reference_unsupported")
    registry.encoder_lane.refusal, registry.encoder_lane.is_dead = None, True
    refused(register(pb, registry, "alice"), None, None, EndReason.LANE_DOWN)
    assert registry.store.get("alice") is None and pb.SERVER.unloaded == []  # the router heals lanes, not this


# ---- the router: a request whose `voice` names a registered voice ----------------------------------------------

@pytest.fixture
def served(pb, tmp_path):
    """A router over fake lanes and a registry sharing one data directory, as in one server."""
    from backend_python.voice_registry.model import VoiceRegistryModel
    from tests.middle.conftest import Lanes
    params = {"model": "qwen3-tts-tiny-base", "data_dir": str(tmp_path)}
    lanes = Lanes(pb, "voxlane", params)
    encoder = FakeEncoderLane(pb)
    pb.SERVER.handlers["voice_encoder"] = encoder
    lanes.lm.model.supports_reference = True
    model = VoiceRegistryModel()
    model.initialize({"model_config": json.dumps(
        {"parameters": {key: {"string_value": value} for key, value in params.items()}})})
    model._presets = lanes.lm.model.voices
    yield lanes, model, encoder
    lanes.close()


def spoken(lanes, request):
    from tests.middle.test_router_relay import outcome
    from tests.middle.conftest import chunk
    import queue
    import time
    deadline = time.monotonic() + 5.0
    while not request.sender.is_final.is_set() and time.monotonic() < deadline:  # refused, or accepted by the LM
        try:
            seq = lanes.engine.added.get(timeout=0.01)
        except queue.Empty:
            continue
        seq.sink.emit(chunk(0))
        lanes.engine.finish(seq.request_id, None)
        break
    return outcome(request)


def test_a_registered_voice_reaches_the_lm_as_its_inline_reference_does_without_the_encoder(pb, served):
    lanes, model, encoder = served
    register(pb, model, "alice")
    inline = lanes.speak("Say this.", ref_audio=AUDIO, ref_sample_rate=np.int32(RATE), ref_text=REF_TEXT)
    assert spoken(lanes, inline)[1] is None
    num_encoded = len(encoder.calls)
    chunks, ended = spoken(lanes, lanes.speak("Say this.", voice="alice"))
    assert ended is None and [i for i, _, _ in chunks] == [0]
    assert len(encoder.calls) == num_encoded  # the stored tensors: no encoder call
    inline_names, named_names = lanes.lm_input_names[-2:]
    assert sorted(inline_names) == sorted(named_names)
    inline_request, named_request = lanes.lm_requests[-2:]
    assert named_request["voice"] is None and named_request == inline_request  # the name goes, its tensors speak
    inline_reference, named_reference = lanes.lm.model.references[-2:]
    assert named_reference.text == inline_reference.text == REF_TEXT
    assert sorted(named_reference.tensors) == sorted(inline_reference.tensors) == ["ref_codes", "speaker_embedding"]
    for name, tensor in inline_reference.tensors.items():
        assert named_reference.tensors[name].dtype == tensor.dtype
        assert named_reference.tensors[name].tolist() == tensor.tolist()


def test_a_voice_registered_by_another_process_is_found_and_a_deleted_one_is_unknown(pb, served, tmp_path):
    from backend_python.voice_registry.store import VoiceStore, VoiceStoreSettings
    lanes, model, _ = served
    assert lanes.router.voices.get("bob") is None  # looked up (and missed) before it exists
    other = VoiceStore.from_settings(VoiceStoreSettings(model="qwen3-tts-tiny-base", data_dir=str(tmp_path)))
    other.add(other.new_voice("bob", {"speaker_embedding": np.ones(8, np.float32)}, AUDIO, RATE, None, True))
    assert spoken(lanes, lanes.speak("Hi.", voice="bob"))[1] is None
    assert lanes.lm.model.references[-1].text is None
    other.delete("bob")
    ended = spoken(lanes, lanes.speak("Hi.", voice="bob"))[1]
    assert (ended.reason, ended.param, ended.code) == (EndReason.REFUSED_BAD_INPUT, "voice", "unknown_voice")


def test_a_preset_voice_still_goes_to_the_lm_and_an_unknown_one_is_refused_there(pb, served):
    lanes, _, encoder = served
    assert spoken(lanes, lanes.speak("Hi.", voice="tiny"))[1] is None
    assert lanes.lm_requests[-1]["voice"] == "tiny" and lanes.lm.model.references[-1] is None
    ended = spoken(lanes, lanes.speak("Hi.", voice="nobody"))[1]
    assert (ended.reason, ended.param, ended.code) == (EndReason.REFUSED_BAD_INPUT, "voice", "unknown_voice")
    assert encoder.calls == []


def test_a_registered_voice_and_a_reference_together_are_refused_at_once(pb, served):
    lanes, model, encoder = served
    register(pb, model, "alice")
    ended = spoken(lanes, lanes.speak("Hi.", voice="alice", ref_audio=AUDIO, ref_sample_rate=np.int32(RATE),
                                      x_vector_only=np.bool_(True)))[1]
    assert (ended.reason, ended.param, ended.code) == (EndReason.REFUSED_BAD_INPUT, "voice", "voice_and_reference")
    assert len(encoder.calls) == 1 and len(lanes.lm_input_names) == 0


def test_on_a_model_of_cloned_voices_only_an_unknown_name_is_unknown_voice_and_no_name_is_missing_ref_audio(
        pb, served):
    lanes, _, _ = served
    lanes.lm.model.voices = ()  # a Base model: no preset voices
    ended = spoken(lanes, lanes.speak("Hi.", voice="nobody"))[1]
    assert (ended.reason, ended.param, ended.code) == (EndReason.REFUSED_BAD_INPUT, "voice", "unknown_voice")
    assert "registered" in ended.message
    ended = spoken(lanes, lanes.speak("Hi."))[1]
    assert (ended.reason, ended.param, ended.code) == (EndReason.REFUSED_BAD_INPUT, "ref_audio", "missing_ref_audio")


def test_a_voice_exported_by_one_registry_imports_into_another_s_directory(pb, registry, tmp_path):
    from backend_python.voice_registry.model import VoiceRegistryModel
    register(pb, registry, "alice")
    exported = call(pb, registry, "export", name="alice")
    other = VoiceRegistryModel()
    other.initialize({"model_config": json.dumps({"parameters": {
        "model": {"string_value": "qwen3-tts-tiny-base"}, "data_dir": {"string_value": str(tmp_path / "other")}}})})
    other._presets = ("tiny",)
    file = np.array([base64.b64decode(exported["file"])], dtype=np.object_)
    imported = call(pb, other, "import", name="alice", voice_file=file)
    assert imported == {k: v for k, v in exported.items() if k != "file"}
    for name, array in registry.store.get("alice").lm_inputs().items():
        np.testing.assert_array_equal(other.store.get("alice").lm_inputs()[name], array)
    assert len(registry.encoder_lane.calls) == 1  # copied, not encoded again
    refused(call(pb, other, "import", name="tiny", voice_file=file), "name", "preset_voice_name")
    refused(call(pb, other, "import", name="bob", voice_file=np.array([b"junk"], dtype=np.object_)), "voice_file",
            "bad_voice_file")
    refused(call(pb, other, "import", name="bob"), "voice_file", None)
    refused(call(pb, registry, "export", name="nobody"), "name", "voice_not_found")


def test_with_admin_keys_writes_need_one_and_reads_do_not(pb, tmp_path):
    """A server given admin keys (`voxlane serve --admin-key`): register, delete and import straight through
    Triton need one of them as the request parameter `admin_key`; list and export do not."""
    from backend_python.voice_registry.model import VoiceRegistryModel
    from protocol.admin import key_hash
    pb.SERVER.reset()
    pb.SERVER.handlers["voice_encoder"] = FakeEncoderLane(pb)
    model = VoiceRegistryModel()
    params = {"model": "qwen3-tts-tiny-base", "data_dir": str(tmp_path),
              "admin_key_sha256": f"{key_hash('first')},{key_hash('second')}"}
    model.initialize({"model_config": json.dumps(
        {"parameters": {key: {"string_value": value} for key, value in params.items()}})})
    model._presets = ("tiny",)

    def as_admin(key, action: str, **inputs):
        tensors = [pb.Tensor("action", np.array([action.encode()], dtype=np.object_))]
        tensors += [pb.Tensor(n, v if isinstance(v, np.ndarray) else np.array([v.encode() if isinstance(v, str) else v]))
                    for n, v in inputs.items()]
        response, = model.execute([pb.Request(tensors, parameters=None if key is None else {"admin_key": key})])
        if response.has_error():
            return decode_error(response.error().message())
        return json.loads(pb.get_output_tensor_by_name(response, "voices").as_numpy()[0])

    reference = {"ref_audio": AUDIO, "ref_sample_rate": np.int32(RATE), "ref_text": REF_TEXT}
    for key in (None, "wrong", "", 7):
        refused(as_admin(key, "register", name="alice", **reference), "admin_key", "admin_key_required")
        refused(as_admin(key, "delete", name="alice"), "admin_key", "admin_key_required")
    assert as_admin("second", "register", name="alice", **reference)["name"] == "alice"
    assert [v["name"] for v in as_admin(None, "list")["data"]] == ["alice"]
    exported = as_admin(None, "export", name="alice")
    refused(as_admin(None, "import", name="bob", voice_file=np.array([base64.b64decode(exported["file"])],
                                                                      dtype=np.object_)), "admin_key", "admin_key_required")
    assert as_admin("first", "delete", name="alice")["deleted"] is True


def test_model_control_needs_the_control_key_or_an_admin_key_and_says_whether_the_model_serves(pb, tmp_path):
    """`voxlane serve` hands the registry its control key in a file; writes stay open without admin keys, model
    control does not."""
    from backend_python.voice_registry.model import VoiceRegistryModel
    pb.SERVER.reset()
    key_file = tmp_path / "control_key"
    key_file.write_text("control-key-123\n")
    model = VoiceRegistryModel()
    params = {"model": "qwen3-tts-tiny-base", "data_dir": str(tmp_path), "control_key_file": str(key_file)}
    model.initialize({"model_config": json.dumps(
        {"parameters": {key: {"string_value": value} for key, value in params.items()}})})

    def control(key, action: str, name: str):
        tensors = [pb.Tensor("action", np.array([action.encode()], dtype=np.object_)),
                   pb.Tensor("name", np.array([name.encode()], dtype=np.object_))]
        response, = model.execute([pb.Request(tensors, parameters=None if key is None else {"admin_key": key})])
        if response.has_error():
            return decode_error(response.error().message())
        return json.loads(pb.get_output_tensor_by_name(response, "voices").as_numpy()[0])

    for key in (None, "wrong"):
        refused(control(key, "unload_model", "speechlm_lm"), "admin_key", "admin_key_required")
    assert pb.SERVER.unloaded == []
    assert control("control-key-123", "unload_model", "speechlm_lm") == {"object": "model", "name": "speechlm_lm",
                                                                         "ready": False}
    assert pb.SERVER.unloaded == ["speechlm_lm"]


def test_model_control_asks_triton_only_for_a_model_of_the_served_repository(pb, tmp_path):
    """In Triton 2.51 a failed load may kill the stub that asked (its error is read from freed shared memory): a name
    the repository does not hold is refused before Triton sees it, and a model it holds is loaded."""
    from backend_python.voice_registry.model import VoiceRegistryModel
    pb.SERVER.reset()
    repository = tmp_path / "model_repository"
    for model in ("voice_registry", "speechlm_lm", "codec"):
        (repository / model / "1").mkdir(parents=True)
        (repository / model / "config.pbtxt").write_text(f'name: "{model}"\n')
    (repository / "notes").mkdir()  # a folder with no config is no model
    model = VoiceRegistryModel()
    params = {"model": "qwen3-tts-tiny-base", "data_dir": str(tmp_path / "voices")}
    model.initialize({"model_repository": str(repository / "voice_registry"), "model_config": json.dumps(
        {"parameters": {key: {"string_value": value} for key, value in params.items()}})})
    for action in ("load_model", "unload_model"):
        for name in ("no_such_model", "notes", "../model_repository", "codec/1"):
            answer = call(pb, model, action, name=name)
            refused(answer, "name", "model_control_failed", EndReason.REFUSED_BAD_INPUT)
            assert "has no model of that name" in answer.message and "'codec', 'speechlm_lm'" in answer.message
    assert pb.SERVER.loaded == [] and pb.SERVER.unloaded == []
    assert call(pb, model, "load_model", name="codec") == {"object": "model", "name": "codec", "ready": True}
    assert pb.SERVER.loaded == ["codec"]


def voice_file(name: str = "v", transcript: str | None = REF_TEXT, x_vector_only: bool = False, meta_pad: int = 0,
               **tensors) -> np.ndarray:
    """A voice's file as an export answers it, holding `tensors` (the fake encoder's by default) and its metadata."""
    from backend_python.voice_registry.store import META, Voice, _encoded
    tensors = tensors or {"speaker_embedding": np.zeros(8, np.float32),
                          "ref_codes": np.arange(30 * 16, dtype=np.int64).reshape(30, 16)}
    voice = Voice(name, tensors, transcript, x_vector_only, RATE, 1.5, 1, "f" * 64)
    data = _encoded(voice)
    if meta_pad:  # the same voice, its metadata padded with an unknown field
        meta = {**voice.metadata(), "duration_s": 1.5, "fingerprint": "f" * 64, "pad": "x" * meta_pad}
        buffer = io.BytesIO()
        np.savez(buffer, **tensors, **{META: np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)})
        data = buffer.getvalue()
    return np.array([data], dtype=np.object_)


UNUSABLE_VOICES = {
    "an embedding of 3": (dict(speaker_embedding=np.zeros(3, np.float32)), True, "voice_mismatch"),
    "an embedding of 8192": (dict(speaker_embedding=np.zeros(8192, np.float32)), True, "voice_mismatch"),
    "codes of 8 codebooks": (dict(speaker_embedding=np.zeros(8, np.float32),
                                  ref_codes=np.zeros((30, 8), np.int64)), False, "voice_mismatch"),
    "codes past the codebook": (dict(speaker_embedding=np.zeros(8, np.float32),
                                     ref_codes=np.full((30, 16), 1 << 12, np.int64)), False, "voice_mismatch"),
    "in context without codes": (dict(speaker_embedding=np.zeros(8, np.float32)), False, "voice_mismatch"),
}


@pytest.mark.parametrize("tensors, x_vector_only, code", UNUSABLE_VOICES.values(), ids=UNUSABLE_VOICES)
def test_an_imported_voice_the_model_cannot_speak_is_refused_before_it_is_stored(pb, registry, tensors,
                                                                                 x_vector_only, code):
    """Checked against what the served model's encoder makes (asked of it once): such a voice would fail every
    request that names it, on this server and on each the gateway copies it to."""
    answer = call(pb, registry, "import", name="bad", voice_file=voice_file(x_vector_only=x_vector_only, **tensors))
    refused(answer, "voice_file", code)
    assert call(pb, registry, "list")["data"] == [] and registry.store.get("bad") is None


@pytest.mark.parametrize("transcript, meta_pad, code", [
    (None, 0, "missing_ref_text"),  # in context: its prompt holds the transcript
    ("bell\x07", 0, "bad_voice_file"),
    ("w" * 50_000, 0, "bad_voice_file"),
    (REF_TEXT, 5 << 20, "bad_voice_file"),  # 5 MB of metadata
], ids=["no-transcript", "control-character", "50k-characters", "5MB-metadata"])
def test_an_imported_voice_with_a_bad_transcript_or_metadata_is_refused(pb, registry, transcript, meta_pad, code):
    answer = call(pb, registry, "import", name="bad", voice_file=voice_file(transcript=transcript, meta_pad=meta_pad))
    refused(answer, "voice_file", code)
    assert registry.store.get("bad") is None


def test_a_voice_the_model_can_speak_imports_and_the_spec_is_asked_once(pb, registry):
    assert call(pb, registry, "import", name="good", voice_file=voice_file())["name"] == "good"
    assert call(pb, registry, "import", name="xv", voice_file=voice_file(
        transcript=None, x_vector_only=True, speaker_embedding=np.zeros(8, np.float32)))["name"] == "xv"
    assert registry.encoder_lane.spec_calls == 1
